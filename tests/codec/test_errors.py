"""CodecError (codec/errors.py): where an error happened, added level by level."""
from __future__ import annotations

import pytest

from aipu.codec.errors import CodecError, error_context


def test_codec_error_context():
    error = CodecError("bad value", bit_position=8123, element="oct_abs_q")
    error.add_context(bit_position=1, element="outer", layer=2)
    assert error.bit_position == 8123 and error.element == "oct_abs_q"
    text = str(error)
    assert "bit 8123 = byte 1015 bit 3" in text and "oct_abs_q" in text and "layer 2" in text
    with pytest.raises(CodecError, match="ctu 7") as info:
        with error_context(layer=2, ctu=7):
            raise CodecError("boom")
    assert isinstance(info.value, ValueError)
    assert info.value.context == {"layer": 2, "ctu": 7}
