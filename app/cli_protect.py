"""`aipu codec protect|unprotect|keygen`: T/AI 115.1-2021 chapter 11, a model encrypted for one key pair
(docs/protection.md).

The crypto libraries are imported inside the handlers (through aipu.codec.protection): building the `aipu`
parser stays cheap. Every failure is an InputError naming the file, so the CLI prints one line and exits 2.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from aipu.sim.machine.errors import InputError
from aipu.sim.machine.files import read_at_most


def _key(path: str, private: bool):
    from aipu.codec.protection_keys import MAX_KEY_FILE_BYTES, load_private_key, load_public_key
    data = read_at_most(path, MAX_KEY_FILE_BYTES)
    try:
        return load_private_key(data) if private else load_public_key(data)
    except InputError as error:
        raise error.within(path) from None


def _cmd_protect(args: argparse.Namespace) -> int:
    from aipu.codec.protection import CIPHERS, MAX_MODEL_BYTES, SYM_NAMES, protect
    from aipu.codec.protection_keys import ASYM_NAMES, key_algorithm
    public_key = _key(args.key, private=False)
    data = read_at_most(args.input, MAX_MODEL_BYTES)
    protected = protect(data, public_key, args.cipher)
    Path(args.output).write_bytes(protected)
    print(f"{args.output}: {len(protected)} bytes, {len(data)} bytes of {args.input} under "
          f"{SYM_NAMES[CIPHERS[args.cipher]]}, its key wrapped with {ASYM_NAMES[key_algorithm(public_key)]} "
          f"for {args.key}")
    return 0


def _cmd_unprotect(args: argparse.Namespace) -> int:
    from aipu.codec.protection import MAX_PROTECTED_BYTES, SYM_NAMES, read_encrypt_info, unprotect
    private_key = _key(args.key, private=True)
    data = read_at_most(args.input, MAX_PROTECTED_BYTES)
    try:
        plain = unprotect(data, private_key)
    except InputError as error:
        raise error.within(args.input) from None
    Path(args.output).write_bytes(plain)
    cipher = SYM_NAMES[read_encrypt_info(data).symalgno]
    print(f"{args.output}: {len(plain)} bytes, decrypted and authenticated ({cipher})")
    return 0


def _cmd_keygen(args: argparse.Namespace) -> int:
    from aipu.codec.protection_keys import generate_key, private_key_file, public_key_file
    private_path, public_path = Path(args.output), Path(args.output + ".pub")
    for path in (private_path, public_path):
        if os.path.lexists(path):
            raise InputError("-o", str(path), "a name no file has yet: keygen never overwrites a key")
    try:
        private_key = generate_key(args.algorithm, args.bits)
    except InputError as error:
        raise InputError("--" + error.field, error.value, error.allowed) from None
    _write_new(private_path, private_key_file(private_key), 0o600)
    _write_new(public_path, public_key_file(private_key.public_key()), 0o644)
    print(f"{private_path}: private key (keep it secret), {public_path}: public key ({args.algorithm.upper()}"
          + (f", {args.bits} bits)" if args.algorithm == "rsa" else ")"))
    return 0


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """``data`` into a file that must not exist yet, created with ``mode`` (a private key: owner only)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)


def register_protection(commands: argparse._SubParsersAction) -> None:
    """Add protect, unprotect and keygen to `aipu codec`'s actions."""
    protect = commands.add_parser("protect", help="encrypt a model (.nnr or any file) for a public key "
                                                  "(T/AI 115.1-2021 chapter 11)")
    protect.add_argument("input", help="the file to protect, e.g. model.nnr")
    protect.add_argument("-o", "--output", required=True, help="the protected file (e.g. model.nnrp)")
    protect.add_argument("--key", required=True, help="the recipient's public key, NAME.pub of `aipu codec keygen` "
                                                      "or an RSA PEM public key; its type chooses RSA or SM2")
    protect.add_argument("--cipher", choices=("aes", "sm4"), default="aes",
                         help="aes: AES-256-GCM (SymAlgNO 1, default); sm4: SM4-GCM (SymAlgNO 2)")
    protect.set_defaults(func=_cmd_protect)

    unprotect = commands.add_parser("unprotect", help="decrypt and authenticate a protected model")
    unprotect.add_argument("input", help="the protected file")
    unprotect.add_argument("-o", "--output", required=True, help="the model as it was before protect")
    unprotect.add_argument("--key", required=True, help="the private key the model was protected for")
    unprotect.set_defaults(func=_cmd_unprotect)

    keygen = commands.add_parser("keygen", help="a new key pair: NAME (private) and NAME.pub (public)")
    keygen.add_argument("--algorithm", choices=("rsa", "sm2"), default="rsa",
                        help="rsa: RSA-OAEP-SHA256 (AsymAlgNO 1, default); sm2: SM2 encryption (AsymAlgNO 2)")
    keygen.add_argument("--bits", type=int, default=3072, help="RSA modulus size (default 3072; 2048 .. 16384)")
    keygen.add_argument("-o", "--output", required=True, metavar="NAME", help="the private key's file name")
    keygen.set_defaults(func=_cmd_keygen)
