"""Model protection, T/AI 115.1-2021 chapter 11: ``protect`` (§11.2, Table 345) and ``unprotect`` (§11.3,
Table 347) of any bytes, typically an ``.nnr`` container, in the CipherModelData container of Table 348.

The standard fixes the scheme (a random working key and IV; the key wrapped with the public key by AsymAlgNO,
1 RSA, 2 SM2; the model encrypted with the working key by SymAlgNO, 1 AES, 2 SM4) and leaves the rest open.
docs/protection.md records each choice; in short, all little-endian::

    EncryptInfo  magic b"AIPUNNRP" | u32 version 1 | u32 symalgno | u32 asymalgno | u32 iv size | u32 key size
                 | iv | key | u64 mid_data size
    mid_data     ciphertext | 16-byte GCM tag

SymAlgNO 1 is AES-256-GCM and 2 SM4-GCM (128-bit key), with a 96-bit IV; the whole EncryptInfo is the GCM
associated data, so a change to any bit of the file is refused. Every field is checked before anything is
decrypted, and every failure is an InputError (one line: field, value, what is allowed).
"""
from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass

from aipu.sim.machine.errors import InputError

from .protection_keys import (ASYM_NAMES, ASYM_RSA, ASYM_SM2, WrongKeyError, key_algorithm, unwrap, wrap,
                              wrapped_key_sizes)

MAGIC = b"AIPUNNRP"
VERSION = 1
FIXED = struct.Struct("<8s5I")           # magic, version, symalgno, asymalgno, iv size, key size
MID_SIZE = struct.Struct("<Q")           # after iv and key
SYM_AES, SYM_SM4 = 1, 2                  # SymAlgNO of T/AI 115.1-2021 §11.2 (c)
CIPHERS = {"aes": SYM_AES, "sm4": SYM_SM4}
SYM_NAMES = {SYM_AES: "AES-256-GCM", SYM_SM4: "SM4-GCM"}
WORKING_KEY_BYTES = {SYM_AES: 32, SYM_SM4: 16}
IV_BYTES = 12                            # GCM's own IV size (NIST SP 800-38D §5.2.1.1)
TAG_BYTES = 16
MAX_PROTECTED_BYTES = 1 << 31            # what ``aipu codec unprotect`` reads of a file
MAX_MODEL_BYTES = MAX_PROTECTED_BYTES - (1 << 16)   # what ``protect`` reads: the header fits in the difference
__all__ = ["ASYM_RSA", "ASYM_SM2", "AuthenticationError", "EncryptInfo", "WrongKeyError", "protect",
           "read_encrypt_info", "unprotect"]


class AuthenticationError(InputError):
    """The GCM tag does not match: some bit of the file changed after it was protected."""


@dataclass(frozen=True)
class EncryptInfo:
    """Table 348's EncryptInfo as read and checked, with the bytes it covers (the GCM associated data)."""

    version: int
    symalgno: int
    asymalgno: int
    iv: bytes
    key: bytes
    header: bytes
    mid_data: memoryview                 # a view into the file's bytes, not a copy


def protect(data: bytes, public_key, cipher: str = "aes") -> bytes:
    """``data`` encrypted for the holder of ``public_key``'s private key (Table 345's model_enc).

    ``cipher`` is "aes" (SymAlgNO 1, AES-256-GCM) or "sm4" (SymAlgNO 2, SM4-GCM); the key's type gives AsymAlgNO.
    """
    if cipher not in CIPHERS:
        raise InputError("cipher", cipher, " or ".join(CIPHERS))
    symalgno, asymalgno = CIPHERS[cipher], key_algorithm(public_key)
    working_key, iv = secrets.token_bytes(WORKING_KEY_BYTES[symalgno]), secrets.token_bytes(IV_BYTES)
    key = wrap(public_key, working_key)
    header = (FIXED.pack(MAGIC, VERSION, symalgno, asymalgno, len(iv), len(key)) + iv + key
              + MID_SIZE.pack(len(data) + TAG_BYTES))
    encryptor = gcm(symalgno, working_key, iv).encryptor()
    encryptor.authenticate_additional_data(header)
    body = encryptor.update(data)
    return b"".join((header, body, encryptor.finalize(), encryptor.tag))   # the model's bytes copied once


def unprotect(data: bytes, private_key) -> bytes:
    """The bytes ``protect`` was given (Table 347): every field checked, then the key unwrapped, then the
    model decrypted and authenticated. Nothing is returned before the tag is verified."""
    info = read_encrypt_info(data)
    if info.asymalgno != key_algorithm(private_key):
        raise InputError("asymalgno", f"{info.asymalgno} ({ASYM_NAMES[info.asymalgno]})",
                         f"the algorithm of the private key given, {ASYM_NAMES[key_algorithm(private_key)]}: "
                         "the model was protected for another key pair")
    working_key = unwrap(private_key, info.key)
    expected = WORKING_KEY_BYTES[info.symalgno]
    if len(working_key) != expected:
        raise InputError("working key", f"{len(working_key)} bytes", f"{expected} bytes for {SYM_NAMES[info.symalgno]}")
    from cryptography.exceptions import InvalidTag
    body, tag = info.mid_data[:-TAG_BYTES], bytes(info.mid_data[-TAG_BYTES:])
    decryptor = gcm(info.symalgno, working_key, info.iv, tag).decryptor()
    decryptor.authenticate_additional_data(info.header)
    plain = decryptor.update(body)
    try:
        decryptor.finalize()
    except InvalidTag:
        raise AuthenticationError("mid_data", f"{len(info.mid_data)} bytes of {SYM_NAMES[info.symalgno]}",
                                  "fails authentication: the file was changed or damaged after it was "
                                  "protected") from None
    return plain


def block_cipher(symalgno: int, key: bytes):
    """The ``cryptography`` block cipher of SymAlgNO ``symalgno`` (AES or SM4) under ``key``."""
    from cryptography.hazmat.primitives.ciphers import algorithms
    return (algorithms.AES if symalgno == SYM_AES else algorithms.SM4)(key)


def gcm(symalgno: int, key: bytes, iv: bytes, tag: bytes | None = None):
    """The GCM cipher of SymAlgNO ``symalgno`` with this key and IV (and, to decrypt, the tag)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, modes
    return Cipher(block_cipher(symalgno, key), modes.GCM(iv, tag))


def read_encrypt_info(data: bytes) -> EncryptInfo:
    """EncryptInfo and mid_data of a protected file, every field checked in file order (docs/protection.md §2)."""
    if bytes(data[:len(MAGIC)]) != MAGIC:
        what = "a plain .nnr container, not a protected one" if bytes(data[:7]) == b"AIPUNNR" else "a protected model"
        raise InputError("magic", bytes(data[:len(MAGIC)]), f"{MAGIC!r} ({what})")
    _need(data, FIXED.size, "EncryptInfo")
    _, version, symalgno, asymalgno, iv_size, key_size = FIXED.unpack_from(data)
    if version != VERSION:
        raise InputError("version", version, f"{VERSION}, the only version of this container")
    if symalgno not in SYM_NAMES:
        raise InputError("symalgno", symalgno, _numbers(SYM_NAMES))
    if asymalgno not in ASYM_NAMES:
        raise InputError("asymalgno", asymalgno, _numbers(ASYM_NAMES))
    if iv_size != IV_BYTES:
        raise InputError("iv size", iv_size, f"{IV_BYTES} bytes (the GCM IV)")
    least, most = wrapped_key_sizes(asymalgno, WORKING_KEY_BYTES[symalgno])
    if not least <= key_size <= most:
        sizes = f"{least}" if least == most else f"{least} .. {most}"
        raise InputError("key size", key_size, f"{sizes} bytes for {ASYM_NAMES[asymalgno]} with {SYM_NAMES[symalgno]}")
    mid_at = FIXED.size + iv_size + key_size + MID_SIZE.size
    _need(data, mid_at, "iv, key and mid_data size")
    (mid_size,) = MID_SIZE.unpack_from(data, mid_at - MID_SIZE.size)
    if mid_size < TAG_BYTES:
        raise InputError("mid_data size", mid_size, f"at least {TAG_BYTES} bytes (the GCM tag)")
    _need(data, mid_at + mid_size, "mid_data")
    if len(data) > mid_at + mid_size:
        left = len(data) - mid_at - mid_size
        raise InputError("size", f"{len(data)} bytes", f"{mid_at + mid_size} bytes, as the header says: "
                         f"{left} byte{'s' if left != 1 else ''} after mid_data")
    iv = bytes(data[FIXED.size:FIXED.size + iv_size])
    key = bytes(data[FIXED.size + iv_size:mid_at - MID_SIZE.size])
    return EncryptInfo(version, symalgno, asymalgno, iv, key, bytes(data[:mid_at]), memoryview(data)[mid_at:])


def _need(data: bytes, size: int, what: str) -> None:
    if len(data) < size:
        raise InputError("size", f"{len(data)} bytes", f"at least {size} bytes to hold {what}: the file is truncated")


def _numbers(names: dict[int, str]) -> str:
    return ", ".join(f"{number} ({name})" for number, name in names.items())
