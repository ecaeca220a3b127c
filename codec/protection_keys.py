"""The key pairs of model protection (T/AI 115.1-2021 §11.2 (b), §11.3): RSA and SM2, their files, and the
wrapping of a working key with them (docs/protection.md §3, §4).

* RSA (AsymAlgNO 1): RSAES-OAEP with SHA-256 and MGF1-SHA-256 (PKCS#1 v2.2), by ``cryptography``; keys are PEM
  files, SubjectPublicKeyInfo and unencrypted PKCS#8 (or PKCS#1), of 2048 .. 16384 bits.
* SM2 (AsymAlgNO 2): the public-key encryption of GB/T 32918.4-2016 on the curve of GB/T 32918.5, ciphertext
  C1 || C3 || C2 with C1 uncompressed (04 || x || y). Built from ``gmssl``'s point multiplication and SM3, because
  ``gmssl.sm2.CryptSM2`` (3.2.2) draws its ephemeral k from ``random`` (not a CSPRNG) and its decryption neither
  checks C1 on the curve (step B1) nor compares C3 (step B6). Keys are small text files (``SM2_PUBLIC_TAG``).

Every key file is hostile input: each failure is an InputError naming the field, the value and what is allowed.
The crypto libraries are imported inside the functions, so that importing this module stays cheap.
"""
from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass

from aipu.sim.machine.errors import InputError

ASYM_RSA, ASYM_SM2 = 1, 2                  # AsymAlgNO of T/AI 115.1-2021 §11.2 (b)
ASYM_NAMES = {ASYM_RSA: "RSA-OAEP-SHA256", ASYM_SM2: "SM2"}
RSA_BITS = (2048, 16384)                   # NIST's floor; OpenSSL's largest modulus
DEFAULT_RSA_BITS = 3072
MAX_KEY_FILE_BYTES = 16 << 10              # a 16384-bit PKCS#8 PEM is about 12.5 KiB
SM2_PUBLIC_TAG, SM2_PRIVATE_TAG = "AIPU SM2 PUBLIC KEY 1", "AIPU SM2 PRIVATE KEY 1"
SM2_HASH_BYTES, SM2_POINT_BYTES = 32, 65  # C3 (SM3), C1 (04 || x || y)
SM2_OVERHEAD = SM2_POINT_BYTES + SM2_HASH_BYTES


class WrongKeyError(InputError):
    """The private key does not unwrap the working key: another key pair, or a damaged wrapped key."""


@dataclass(frozen=True)
class Sm2PublicKey:
    """A point (x, y) of the SM2 curve, checked on the curve when made."""

    x: int
    y: int

    def __post_init__(self) -> None:
        if not _on_curve(self.x, self.y):
            raise InputError("x, y", "a point off the curve", "a point of the SM2 curve (GB/T 32918.5)")

    def point_hex(self) -> str:
        return f"{self.x:064x}{self.y:064x}"


@dataclass(frozen=True)
class Sm2PrivateKey:
    """d in [1, n - 2] (GB/T 32918.1 §6.1), checked when made."""

    d: int

    def __post_init__(self) -> None:
        if not 1 <= self.d <= _curve_numbers()[3] - 2:
            raise InputError("d", hex(self.d), "1 .. n - 2 of the SM2 curve (GB/T 32918.1 §6.1)")

    def public_key(self) -> Sm2PublicKey:
        x, y = _split_point(_multiply(self.d, _curve()["g"]))
        return Sm2PublicKey(x, y)


# ------------------------------------------------------------------------------------------------ the SM2 curve
def _curve() -> dict[str, str]:
    from gmssl import sm2
    return sm2.default_ecc_table


def _curve_numbers() -> tuple[int, int, int, int]:
    table = _curve()
    return tuple(int(table[name], 16) for name in ("p", "a", "b", "n"))


def _multiply(k: int, point_hex: str) -> str:
    """[k]P as 128 hex digits x || y, by gmssl (its Jacobian scalar multiplication; the table's curve)."""
    from gmssl import sm2
    engine = sm2.CryptSM2(private_key="", public_key="")
    return engine._kg(k, point_hex)


def _split_point(point_hex: str) -> tuple[int, int]:
    return int(point_hex[:64], 16), int(point_hex[64:], 16)


def _on_curve(x: int, y: int) -> bool:
    p, a, b, _ = _curve_numbers()
    return 0 <= x < p and 0 <= y < p and (y * y - (x * x * x + a * x + b)) % p == 0


def _sm3(data: bytes) -> bytes:
    from gmssl import sm3
    return bytes.fromhex(sm3.sm3_hash(list(data)))


def _kdf(shared_point_hex: str, length: int) -> bytes:
    """The KDF of GB/T 32918.4 §5.4.3 (SM3, counter from 1) over x2 || y2, by gmssl."""
    from gmssl import sm3
    return bytes.fromhex(sm3.sm3_kdf(shared_point_hex.encode("ascii"), length))


def _sm2_encrypt(public: Sm2PublicKey, message: bytes) -> bytes:
    """GB/T 32918.4-2016 §6.1, steps A1-A8, with k from ``secrets``: C1 || C3 || C2."""
    n = _curve_numbers()[3]
    while True:
        k = 1 + secrets.randbelow(n - 1)                                    # A1
        c1 = _multiply(k, _curve()["g"])                                    # A2
        shared = _multiply(k, public.point_hex())                           # A4 (h = 1: A3 is the key check)
        mask = _kdf(shared, len(message))                                   # A5
        if any(mask):
            break
    c2 = bytes(m ^ t for m, t in zip(message, mask))                        # A6
    x2, y2 = bytes.fromhex(shared[:64]), bytes.fromhex(shared[64:])
    c3 = _sm3(x2 + message + y2)                                            # A7
    return b"\x04" + bytes.fromhex(c1) + c3 + c2                            # A8, C1 C3 C2


def _sm2_decrypt(private: Sm2PrivateKey, ciphertext: bytes) -> bytes | None:
    """GB/T 32918.4-2016 §7.1, steps B1-B7; None where a step refuses (not on the curve, t = 0, u != C3)."""
    if len(ciphertext) <= SM2_OVERHEAD or ciphertext[0] != 4:
        return None
    x1, y1 = int.from_bytes(ciphertext[1:33], "big"), int.from_bytes(ciphertext[33:65], "big")
    if not _on_curve(x1, y1):                                               # B1 (h = 1: B2 holds)
        return None
    shared = _multiply(private.d, ciphertext[1:65].hex())                   # B3
    c3, c2 = ciphertext[65:97], ciphertext[97:]
    mask = _kdf(shared, len(c2))                                            # B4
    if not any(mask):
        return None
    message = bytes(c ^ t for c, t in zip(c2, mask))                        # B5
    u = _sm3(bytes.fromhex(shared[:64]) + message + bytes.fromhex(shared[64:]))
    return message if hmac.compare_digest(u, c3) else None                  # B6, B7


# ------------------------------------------------------------------------------------------ wrapping a working key
def key_algorithm(key) -> int:
    """AsymAlgNO of a public or private key object (1 RSA, 2 SM2); TypeError for any other object."""
    if isinstance(key, (Sm2PublicKey, Sm2PrivateKey)):
        return ASYM_SM2
    from cryptography.hazmat.primitives.asymmetric import rsa
    if isinstance(key, (rsa.RSAPublicKey, rsa.RSAPrivateKey)):
        return ASYM_RSA
    raise TypeError(f"an RSA or SM2 key object, not {type(key).__name__}")


def wrapped_key_sizes(asymalgno: int, working_key_bytes: int) -> tuple[int, int]:
    """The least and largest size of a wrapped key that an algorithm can give (docs/protection.md §2)."""
    if asymalgno == ASYM_SM2:
        return SM2_OVERHEAD + working_key_bytes, SM2_OVERHEAD + working_key_bytes
    return RSA_BITS[0] // 8, RSA_BITS[1] // 8


def wrap(public_key, working_key: bytes) -> bytes:
    """``working_key`` encrypted with ``public_key`` (Table 345's rsa_enc / sm2_enc)."""
    if isinstance(public_key, Sm2PublicKey):
        return _sm2_encrypt(public_key, working_key)
    if not hasattr(public_key, "encrypt"):
        raise TypeError(f"a public key, not {type(public_key).__name__}")
    return public_key.encrypt(working_key, _oaep())


def unwrap(private_key, wrapped: bytes) -> bytes:
    """The working key (Table 347's rsa_dec / sm2_dec); WrongKeyError when this key does not open it."""
    if isinstance(private_key, Sm2PrivateKey):
        working_key = _sm2_decrypt(private_key, wrapped)
    else:
        working_key = _rsa_decrypt(private_key, wrapped)
    if working_key is None:
        raise WrongKeyError("key", f"{len(wrapped)} bytes wrapped with {ASYM_NAMES[key_algorithm(private_key)]}",
                            "the private key does not unwrap it: the model was protected for another key pair, "
                            "or its wrapped key is damaged")
    return working_key


def _oaep():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    return padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


def _rsa_decrypt(private_key, wrapped: bytes) -> bytes | None:
    if len(wrapped) != private_key.key_size // 8:
        return None                      # made for a key of another size
    try:
        return private_key.decrypt(wrapped, _oaep())
    except ValueError:                   # OAEP's check failed: another key, or damaged bytes
        return None


# ------------------------------------------------------------------------------------------------- new key pairs
def generate_key(algorithm: str, bits: int = DEFAULT_RSA_BITS):
    """A new private key: ``algorithm`` "rsa" (of ``bits`` bits, exponent 65537) or "sm2"."""
    if algorithm == "sm2":
        n = _curve_numbers()[3]
        return Sm2PrivateKey(1 + secrets.randbelow(n - 2))
    if algorithm != "rsa":
        raise InputError("algorithm", algorithm, "rsa or sm2")
    if not RSA_BITS[0] <= bits <= RSA_BITS[1] or bits % 8:
        raise InputError("bits", bits, f"a multiple of 8 in {RSA_BITS[0]} .. {RSA_BITS[1]}")
    from cryptography.hazmat.primitives.asymmetric import rsa
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def public_key_of(private_key):
    return private_key.public_key()


def private_key_file(private_key) -> bytes:
    """The private key's file: unencrypted PKCS#8 PEM (RSA) or the SM2 text file (docs/protection.md §4)."""
    if isinstance(private_key, Sm2PrivateKey):
        return f"{SM2_PRIVATE_TAG}\nd={private_key.d:064x}\n".encode("ascii")
    from cryptography.hazmat.primitives import serialization
    return private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())


def public_key_file(public_key) -> bytes:
    """The public key's file: SubjectPublicKeyInfo PEM (RSA) or the SM2 text file."""
    if isinstance(public_key, Sm2PublicKey):
        return f"{SM2_PUBLIC_TAG}\nx={public_key.x:064x}\ny={public_key.y:064x}\n".encode("ascii")
    from cryptography.hazmat.primitives import serialization
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


# ------------------------------------------------------------------------------------------------- reading keys
_PEM_PUBLIC = b"-----BEGIN PUBLIC KEY-----"
_PEM_PRIVATE = (b"-----BEGIN PRIVATE KEY-----", b"-----BEGIN RSA PRIVATE KEY-----")
_PEM_ENCRYPTED = b"-----BEGIN ENCRYPTED PRIVATE KEY-----"
_PUBLIC_KINDS = "a public key file: RSA as PEM SubjectPublicKeyInfo, or SM2 as `aipu codec keygen` writes NAME.pub"
_PRIVATE_KINDS = "a private key file: RSA as unencrypted PEM PKCS#8 or PKCS#1, or SM2 as `aipu codec keygen` writes"


def _first_line(data: bytes) -> bytes:
    return data.lstrip().split(b"\n", 1)[0].strip()


def load_public_key(data: bytes):
    """The RSA or SM2 public key in a key file's bytes (the type follows from the file's first line)."""
    head = _first_line(data)
    if head == _PEM_PUBLIC:
        return _load_rsa(data, private=False)
    if head == SM2_PUBLIC_TAG.encode():
        fields = _sm2_fields(data, ("x", "y"))
        return Sm2PublicKey(fields["x"], fields["y"])
    if head in (*_PEM_PRIVATE, _PEM_ENCRYPTED, SM2_PRIVATE_TAG.encode()):
        raise InputError("key", "a private key", "a public key (protect takes NAME.pub, unprotect takes NAME)")
    raise InputError("first line", head[:40], _PUBLIC_KINDS)


def load_private_key(data: bytes):
    """The RSA or SM2 private key in a key file's bytes; RSA keys are checked for consistency by OpenSSL."""
    head = _first_line(data)
    if head in _PEM_PRIVATE:
        return _load_rsa(data, private=True)
    if head == SM2_PRIVATE_TAG.encode():
        return Sm2PrivateKey(_sm2_fields(data, ("d",))["d"])
    if head == _PEM_ENCRYPTED:
        raise InputError("key", "an encrypted PKCS#8 key", "an unencrypted key (openssl pkcs8 -in KEY -out PLAIN)")
    if head in (_PEM_PUBLIC, SM2_PUBLIC_TAG.encode()):
        raise InputError("key", "a public key", "a private key (unprotect takes NAME, protect takes NAME.pub)")
    raise InputError("first line", head[:40], _PRIVATE_KINDS)


def _load_rsa(data: bytes, private: bool):
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    try:
        key = serialization.load_pem_private_key(data, None) if private else serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise InputError("PEM", reason, _PRIVATE_KINDS if private else _PUBLIC_KINDS) from None
    if not isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        raise InputError("algorithm", type(key).__name__.lstrip("_"), "RSA or SM2 (T/AI 115.1-2021 §11.2 (b))")
    numbers = key.public_key().public_numbers() if private else key.public_numbers()
    if not RSA_BITS[0] <= key.key_size <= RSA_BITS[1] or key.key_size % 8:
        raise InputError("RSA modulus", f"{key.key_size} bits", f"a multiple of 8 in {RSA_BITS[0]} .. {RSA_BITS[1]}")
    if numbers.e < 3 or numbers.e % 2 == 0:
        raise InputError("RSA public exponent", numbers.e, "an odd number of at least 3")
    return key


def _sm2_fields(data: bytes, names: tuple[str, ...]) -> dict[str, int]:
    """``name=<64 hex digits>`` lines after the tag line, each name once, no other line (blank lines aside)."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise InputError("encoding", "not ASCII", "an ASCII text file") from None
    lines = [(number, line.strip()) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    expected = ", ".join(f"{name}=<64 hex digits>" for name in names)
    fields: dict[str, int] = {}
    for number, line in lines[1:]:          # the first is the tag line, which the caller has read
        name, _, value = line.partition("=")
        if name not in names or name in fields:
            raise InputError(f"line {number}", line, f"one line each of {expected}")
        if len(value) != 64 or not all(c in "0123456789abcdefABCDEF" for c in value):
            raise InputError(name, value, "64 hex digits (a 256-bit number)")
        fields[name] = int(value, 16)
    missing = [name for name in names if name not in fields]
    if missing:
        raise InputError("fields", ", ".join(sorted(fields)) or "none", f"one line each of {expected}")
    return fields

