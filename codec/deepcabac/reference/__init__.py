"""DeepCABAC's reference in plain Python, one module per part of the method.

``tables`` (the numbers the estimators need), ``estimators`` (three probability estimators behind one
interface), ``engine`` (the binary arithmetic coder, both directions), ``binarization`` (a level as flags and a
remainder), ``contexts`` (the context-selection rules), ``layer_coder`` (a layer's levels, both directions,
through one traversal) and ``nnc`` (NNCodec's layer payload: estimator parameters per context, then levels).
"""
