"""Model protection (T/AI 115.1-2021 chapter 11, docs/protection.md): round trips for the four (SymAlgNO,
AsymAlgNO) pairs, every damaged file refused by a named error, key files read as hostile input, and known-answer
vectors through the very cipher objects the module uses.

RSA keys are 2048 bits and made once per module (keygen is the slow part).
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipu.codec import api, protection
from aipu.codec import protection_keys as keys
from aipu.codec.encoder import FAST_OPTIONS
from aipu.codec.protection import (MAGIC, SYM_AES, SYM_SM4, AuthenticationError, WrongKeyError, protect,
                                   read_encrypt_info, unprotect)
from aipu.sim.machine.errors import InputError

PAIRS = [(cipher, algorithm) for cipher in ("aes", "sm4") for algorithm in ("rsa", "sm2")]


@pytest.fixture(scope="module")
def key_pairs() -> dict[str, tuple]:
    """Two private keys of each algorithm: the recipient's and a stranger's."""
    return {algorithm: (keys.generate_key(algorithm, 2048), keys.generate_key(algorithm, 2048))
            for algorithm in ("rsa", "sm2")}


@pytest.fixture(scope="module")
def container() -> bytes:
    """A real .nnr container: a conv weight with its bias and a 1-D tensor."""
    rng = np.random.default_rng(11)
    tensors = {"conv.weight": rng.normal(0, 0.2, (4, 3, 3, 3)).astype(np.float32),
               "conv.bias": rng.normal(0, 0.1, 4).astype(np.float32),
               "scale": rng.integers(-20, 20, 6).astype(np.int8)}
    return api.encode(tensors, api.CodecOptions(encoder=FAST_OPTIONS))


@pytest.mark.parametrize("cipher, algorithm", PAIRS)
def test_round_trip_of_a_container(cipher, algorithm, key_pairs, container):
    private, _ = key_pairs[algorithm]
    public = keys.load_public_key(keys.public_key_file(private.public_key()))
    protected = protect(container, public, cipher)
    info = read_encrypt_info(protected)
    assert (info.symalgno, info.asymalgno) == (protection.CIPHERS[cipher], keys.key_algorithm(public))
    assert container not in protected
    back = unprotect(protected, keys.load_private_key(keys.private_key_file(private)))
    assert back == container
    assert set(api.decode(back)) == {"conv.weight", "conv.bias", "scale"}
    assert protect(container, public, cipher) != protected       # a fresh working key and IV each time


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=3000), pair=st.sampled_from(PAIRS))
def test_round_trip_of_any_bytes(key_pairs, data, pair):
    cipher, algorithm = pair
    private, _ = key_pairs[algorithm]
    protected = protect(data, private.public_key(), cipher)
    assert len(protected) == len(read_encrypt_info(protected).header) + len(data) + protection.TAG_BYTES
    assert unprotect(protected, private) == data


@pytest.mark.parametrize("algorithm", ["rsa", "sm2"])
def test_another_private_key_is_refused_by_name(algorithm, key_pairs):
    private, stranger = key_pairs[algorithm]
    protected = protect(b"model", private.public_key())
    with pytest.raises(WrongKeyError, match="the private key does not unwrap it"):
        unprotect(protected, stranger)
    other = key_pairs["sm2" if algorithm == "rsa" else "rsa"][0]
    with pytest.raises(InputError, match="^asymalgno = .*protected for another key pair"):
        unprotect(protected, other)


def _expected_error(info, position: int) -> type:
    """Which error a flipped bit at ``position`` of a protected file must give: header fields are checked by
    value, the wrapped key by its unwrapping, and the IV, body and tag by GCM's tag."""
    iv_at = protection.FIXED.size
    key_at = iv_at + len(info.iv)
    mid_size_at = key_at + len(info.key)
    if position < iv_at or mid_size_at <= position < len(info.header):
        return InputError
    return WrongKeyError if key_at <= position < mid_size_at else AuthenticationError


@pytest.mark.parametrize("cipher, algorithm", [("aes", "rsa"), ("sm4", "sm2")])
def test_a_flipped_bit_anywhere_is_refused(cipher, algorithm, key_pairs):
    """Every bit of the fixed header fields; past them every byte, a different bit of it each time."""
    private, _ = key_pairs[algorithm]
    protected = protect(bytes(range(40)), private.public_key(), cipher)
    info = read_encrypt_info(protected)
    flips = [(position, bit) for position in range(len(protected))
             for bit in (range(8) if position < protection.FIXED.size else [position % 8])]
    for position, bit in flips:
        damaged = bytearray(protected)
        damaged[position] ^= 1 << bit
        expected = _expected_error(info, position)
        with pytest.raises(expected) as caught:
            unprotect(bytes(damaged), private)
        assert expected is InputError or type(caught.value) is expected, position
        assert "\n" not in str(caught.value)


def test_the_header_is_authenticated_not_only_checked(key_pairs):
    """A header changed to other valid values (the IV swapped for another) fails GCM's tag."""
    private, _ = key_pairs["rsa"]
    protected = bytearray(protect(b"weights", private.public_key()))
    iv_at = protection.FIXED.size
    protected[iv_at:iv_at + protection.IV_BYTES] = bytes(protection.IV_BYTES)
    with pytest.raises(AuthenticationError, match="fails authentication"):
        unprotect(bytes(protected), private)


def test_every_truncation_is_refused(key_pairs):
    private, _ = key_pairs["sm2"]
    protected = protect(b"a small model", private.public_key(), "sm4")
    for length in range(len(protected)):
        with pytest.raises(InputError) as caught:
            unprotect(protected[:length], private)
        assert ("magic" if length < len(MAGIC) else "truncated") in str(caught.value), length


@pytest.mark.parametrize("extra", [b"\0", b"trailer"])
def test_trailing_bytes_are_refused(key_pairs, extra):
    private, _ = key_pairs["rsa"]
    with pytest.raises(InputError, match=f"{len(extra)} bytes? after mid_data"):
        unprotect(protect(b"model", private.public_key()) + extra, private)


def _with_field(data: bytes, index: int, value: int) -> bytes:
    """``data`` with the u32 field ``index`` of EncryptInfo (0 version, 1 symalgno, ...) set to ``value``."""
    at = len(MAGIC) + 4 * index
    return data[:at] + struct.pack("<I", value) + data[at + 4:]


@pytest.mark.parametrize("index, value, message", [
    (0, 0, r"^version = 0: 1, the only version"), (0, 2, "^version = 2"),
    (1, 0, r"^symalgno = 0: 1 \(AES-256-GCM\), 2 \(SM4-GCM\)"), (1, 3, "^symalgno = 3"),
    (2, 0, r"^asymalgno = 0: 1 \(RSA-OAEP-SHA256\), 2 \(SM2\)"), (2, 1 << 31, "^asymalgno = 2147483648"),
    (3, 16, r"^iv size = 16: 12 bytes"), (4, 255, r"^key size = 255: 256 \.\. 2048 bytes for RSA"),
    (4, 1 << 30, "^key size = 1073741824")])
def test_header_fields_are_named(key_pairs, index, value, message):
    private, _ = key_pairs["rsa"]
    with pytest.raises(InputError, match=message):
        unprotect(_with_field(protect(b"model", private.public_key()), index, value), private)


def test_an_sm2_key_size_must_match_the_cipher(key_pairs):
    private, _ = key_pairs["sm2"]
    protected = protect(b"model", private.public_key(), "aes")
    with pytest.raises(InputError, match=r"^key size = 113: 129 bytes for SM2 with AES-256-GCM"):
        unprotect(_with_field(protected, 4, 113), private)


@pytest.mark.parametrize("data, message", [
    (b"", "^magic = b'': b'AIPUNNRP' \\(a protected model\\)"),
    (b"AIPUNNR2" + bytes(20), "a plain .nnr container, not a protected one"),
    (MAGIC + bytes(3), "^size = '11 bytes': at least 28 bytes to hold EncryptInfo: the file is truncated")])
def test_not_a_protected_file(data, message, key_pairs):
    with pytest.raises(InputError, match=message):
        unprotect(data, key_pairs["rsa"][0])


def test_a_mid_data_shorter_than_the_tag_is_refused(key_pairs):
    private, _ = key_pairs["rsa"]
    info = read_encrypt_info(protect(b"", private.public_key()))
    header = info.header[:-8] + struct.pack("<Q", 15)
    with pytest.raises(InputError, match="^mid_data size = 15: at least 16 bytes"):
        unprotect(header + bytes(15), private)


# ------------------------------------------------------------------------------------------------------- SM2
def test_sm2_wrapping_agrees_with_gmssl_in_c1c3c2_order():
    """Our GB/T 32918.4 ciphertext opens with gmssl's own CryptSM2 in mode 1 (C1C3C2, C1 without its 04 byte),
    and gmssl's opens with ours; gmssl's old C1C2C3 order (mode 0) is refused."""
    from gmssl import sm2
    private = keys.generate_key("sm2")
    public = private.public_key()
    working_key = bytes(range(32))
    engine = sm2.CryptSM2(private_key=f"{private.d:064x}", public_key=public.point_hex(), mode=1)
    ours = keys.wrap(public, working_key)
    assert len(ours) == keys.SM2_OVERHEAD + 32 and ours[0] == 4
    assert engine.decrypt(ours[1:]) == working_key
    assert keys.unwrap(private, b"\x04" + engine.encrypt(working_key)) == working_key
    legacy = sm2.CryptSM2(private_key=f"{private.d:064x}", public_key=public.point_hex(), mode=0)
    with pytest.raises(WrongKeyError):
        keys.unwrap(private, b"\x04" + legacy.encrypt(working_key))


def test_sm2_decryption_known_answer():
    """A C1C3C2 ciphertext published independently of gmssl, on the curve of GB/T 32918.5: the SM2 test of the
    MegaHunt MH1903S SDK (cryptlibTest/sm2_self_test.c: key, message and both orders of its ciphertext)."""
    private = keys.Sm2PrivateKey(0xC46841E769D7F6A7599046C029900CB6D47BBD54BE83AF50284584BC1E390BF9)
    assert private.public_key() == keys.Sm2PublicKey(
        0x1CDFD6D0375D84164EA5CBCD929874F19384743E20407EF1CCFDC07D960643F7,
        0xF0053CCD7FE91230A12003A084964928DE12DC97E6F51F2B46C43935DB9F7857)
    c1 = ("70342F90FA3213647483B18B6974187F9D16F73CBFBECCF88CF57388C0C663E5"
          "CD73A4460987F928ABCD184C0196B55B97E535A45E841BAA62C73B7B81CF31F4")
    c3, c2 = "A4EEE1AF44C46E32977A14BE98C2606BAFFA7A0BA0391A64BC549920357939E8", "64B7FCC88FFC327247A49B36872131A7"
    assert keys.unwrap(private, bytes.fromhex("04" + c1 + c3 + c2)).hex() == "115960c5598a2797c2d02d76d468cdc9"
    with pytest.raises(WrongKeyError):               # the same bytes in the old C1C2C3 order
        keys.unwrap(private, bytes.fromhex("04" + c1 + c2 + c3))


def test_sm2_public_key_whose_x_starts_with_04():
    """gmssl's CryptSM2 strips leading '0'/'4' hex digits of such a key (``lstrip("04")``); ours keeps them."""
    private = keys.Sm2PrivateKey(11)
    assert private.public_key().point_hex().startswith("04")
    assert unprotect(protect(b"model", private.public_key(), "sm4"), private) == b"model"


def test_sm2_c1_off_the_curve_is_refused(key_pairs):
    private, _ = key_pairs["sm2"]
    wrapped = bytearray(keys.wrap(private.public_key(), bytes(16)))
    wrapped[64] ^= 1                           # y1 changed: (x1, y1) leaves the curve (step B1)
    with pytest.raises(WrongKeyError):
        keys.unwrap(private, bytes(wrapped))


# ----------------------------------------------------------------------------------------------- key files
def test_key_files_round_trip(key_pairs):
    for private, _ in key_pairs.values():
        public = private.public_key()
        again = keys.load_public_key(keys.public_key_file(public))
        assert keys.public_key_file(again) == keys.public_key_file(public)
        assert keys.private_key_file(keys.load_private_key(keys.private_key_file(private))) == \
            keys.private_key_file(private)


def _sm2_public(x: str, y: str) -> bytes:
    return f"{keys.SM2_PUBLIC_TAG}\nx={x}\ny={y}\n".encode()


_X, _Y = f"{keys.Sm2PrivateKey(11).public_key().x:064x}", f"{keys.Sm2PrivateKey(11).public_key().y:064x}"


@pytest.mark.parametrize("data, message", [
    (_sm2_public(_X, f"{int(_Y, 16) ^ 1:064x}"), "^x, y = 'a point off the curve'"),
    (_sm2_public(_X, "f" * 64), "^x, y = 'a point off the curve'"),
    (_sm2_public(_X, _Y[:-1]), "^y = .*64 hex digits"),
    (_sm2_public(_X, "g" + _Y[1:]), "^y = .*64 hex digits"),
    (_sm2_public(_X, _Y) + b"x=" + _X.encode(), "^line 4 = .*one line each of x="),
    (_sm2_public(_X, _Y).replace(b"\ny=", b"\nz="), "^line 3 = 'z="),
    (f"{keys.SM2_PUBLIC_TAG}\nx={_X}\n".encode(), "^fields = 'x': one line each of x="),
    (_sm2_public(_X, _Y).replace(b"x=", "ｘ=".encode()), "^encoding = 'not ASCII'"),
    (b"\x00\xff junk", "^first line = .*a public key file"),
    (b"", "^first line = b'': a public key file"),
    (f"{keys.SM2_PRIVATE_TAG}\nd={'1' * 64}\n".encode(), r"^key = 'a private key': a public key \(protect takes")])
def test_bad_public_key_files_are_named(data, message):
    with pytest.raises(InputError, match=message):
        keys.load_public_key(data)


@pytest.mark.parametrize("d, message", [(0, "^d = '0x0': 1 .. n - 2"), (-1, "^d = '0x.*: 1 .. n - 2")])
def test_sm2_private_scalar_out_of_range(d, message):
    n = int(keys._curve()["n"], 16)
    value = n - 1 if d == -1 else d
    with pytest.raises(InputError, match=message):
        keys.load_private_key(f"{keys.SM2_PRIVATE_TAG}\nd={value:064x}\n".encode())


def test_rsa_key_files_are_checked():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(InputError, match="^RSA modulus = '1024 bits': a multiple of 8 in 2048 .. 16384"):
        keys.load_public_key(keys.public_key_file(small.public_key()))
    curve_key = ec.generate_private_key(ec.SECP256R1())
    pem = curve_key.public_key().public_bytes(serialization.Encoding.PEM,
                                              serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(InputError, match="^algorithm = .*: RSA or SM2"):
        keys.load_public_key(pem)
    locked = small.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.BestAvailableEncryption(b"secret"))
    with pytest.raises(InputError, match="^key = 'an encrypted PKCS#8 key'"):
        keys.load_private_key(locked)
    with pytest.raises(InputError, match="^PEM = "):
        keys.load_public_key(b"-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")
    with pytest.raises(InputError, match=r"^key = 'a public key': a private key \(unprotect takes NAME"):
        keys.load_private_key(keys.public_key_file(small.public_key()))


def test_keygen_bounds():
    with pytest.raises(InputError, match="^bits = 1024"):
        keys.generate_key("rsa", 1024)
    with pytest.raises(InputError, match="^algorithm = 'dsa': rsa or sm2"):
        keys.generate_key("dsa")
    with pytest.raises(InputError, match="^cipher = 'des': aes or sm4"):
        protect(b"", keys.generate_key("sm2"), "des")


# ------------------------------------------------------------------------------------ known-answer vectors
def _ecb(symalgno: int, key: str, plain: str) -> str:
    from cryptography.hazmat.primitives.ciphers import Cipher, modes
    encryptor = Cipher(protection.block_cipher(symalgno, bytes.fromhex(key)), modes.ECB()).encryptor()
    return (encryptor.update(bytes.fromhex(plain)) + encryptor.finalize()).hex()


@pytest.mark.parametrize("symalgno, key, plain, cipher", [
    # GB/T 32907-2016 Appendix A, example 1
    (SYM_SM4, "0123456789abcdeffedcba9876543210", "0123456789abcdeffedcba9876543210",
     "681edf34d206965e86b3e94f536e4246"),
    # FIPS-197 Appendix C.1 (AES-128) and C.3 (AES-256)
    (SYM_AES, "000102030405060708090a0b0c0d0e0f", "00112233445566778899aabbccddeeff",
     "69c4e0d86a7b0430d8cdb78070b4c55a"),
    (SYM_AES, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
     "00112233445566778899aabbccddeeff", "8ea2b7ca516745bfeafc49904b496089")])
def test_block_cipher_known_answers(symalgno, key, plain, cipher):
    assert _ecb(symalgno, key, plain) == cipher


@pytest.mark.parametrize("symalgno, key, iv, aad, plain, cipher, tag", [
    # McGrew and Viega, "The Galois/Counter Mode of Operation", test case 16 (AES-256, 96-bit IV, AAD)
    (SYM_AES, "feffe9928665731c6d6a8f9467308308" * 2, "cafebabefacedbaddecaf888",
     "feedfacedeadbeeffeedfacedeadbeefabaddad2",
     "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de6"
     "57ba637b39",
     "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a"
     "0abcc9f662", "76fc6ece0f4e1768cddf8853bb2d551b"),
    # RFC 8998 Appendix A.1, SM4-GCM
    (SYM_SM4, "0123456789abcdeffedcba9876543210", "00001234567800000000abcd",
     "feedfacedeadbeeffeedfacedeadbeefabaddad2",
     "aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbbccccccccccccccccddddddddddddddddeeeeeeeeeeeeeeeeffffffffffffffffeeeeeeeeeeeeeeee"
     "aaaaaaaaaaaaaaaa",
     "17f399f08c67d5ee19d0dc9969c4bb7d5fd46fd3756489069157b282bb200735d82710ca5c22f0ccfa7cbf93d496ac15a56834cbcf98c3"
     "97b4024a2691233b8d", "83de3541e4c2b58177e065a9bf7b62ec")])
def test_gcm_known_answers(symalgno, key, iv, aad, plain, cipher, tag):
    encryptor = protection.gcm(symalgno, bytes.fromhex(key), bytes.fromhex(iv)).encryptor()
    encryptor.authenticate_additional_data(bytes.fromhex(aad))
    assert (encryptor.update(bytes.fromhex(plain)) + encryptor.finalize()).hex() == cipher
    assert encryptor.tag.hex() == tag


def test_protect_takes_a_public_key_object(key_pairs):
    with pytest.raises(TypeError, match="a public key"):
        protect(b"", key_pairs["rsa"][0])
    with pytest.raises(TypeError, match="an RSA or SM2 key object"):
        protect(b"", "alice.pub")
    with pytest.raises(InputError, match="^x, y = 'a point off the curve'"):
        keys.Sm2PublicKey(1, 1)
