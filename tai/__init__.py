"""T/AI 115.1-2021 chapter 6: the model representation (.tai files), and ONNX to and from it (docs/tai.md).

``schema`` holds Tables 7-17 as a proto2 schema (protobuf's wire format is §6.1.1's); ``params`` the separate
parameter storage of §6.1.2; ``file`` the .tai layout and its checked reader; ``operators`` the ONNX <->
§6.3.1 mapping; ``from_onnx``/``to_onnx`` the conversions; ``records`` the chapters 7-8 compression records.
"""
