"""`aipu codec keygen|protect|unprotect` (docs/protection.md): a user's round trip byte for byte, each refusal
one line with status 2, and a fuzzer: random damage to a protected file or a key file never gives a traceback.
"""
from __future__ import annotations

import stat

import numpy as np
import pytest
from hypothesis import strategies as st

from aipu.app.cli import main
from aipu.codec import api
from aipu.codec.encoder import FAST_OPTIONS
from tests.sandbox import assert_one_line_error, fuzz, profiles, run_case, run_cli
from tests.strategies import mangled_bytes


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """Key pairs made by the CLI (RSA at 2048 bits for speed), a real container and its protected forms."""
    folder = tmp_path_factory.mktemp("protect")
    rng = np.random.default_rng(3)
    model = folder / "m.nnr"
    model.write_bytes(api.encode({"fc.weight": rng.normal(0, 0.1, (6, 5)).astype(np.float32)},
                                 api.CodecOptions(encoder=FAST_OPTIONS)))
    assert main(["codec", "keygen", "--bits", "2048", "-o", str(folder / "rsa")]) == 0
    assert main(["codec", "keygen", "--algorithm", "sm2", "-o", str(folder / "sm2")]) == 0
    paths = {"folder": folder, "model": model}
    for algorithm, cipher in (("rsa", "aes"), ("sm2", "sm4")):
        protected = folder / f"m.{algorithm}.nnrp"
        assert main(["codec", "protect", str(model), "-o", str(protected), "--key", str(folder / f"{algorithm}.pub"),
                     "--cipher", cipher]) == 0
        paths[algorithm] = protected
    return paths


@pytest.mark.parametrize("algorithm", ["rsa", "sm2"])
def test_protect_then_unprotect_gives_the_bytes_back(files, algorithm, tmp_path, capsys):
    back = tmp_path / "back.nnr"
    assert main(["codec", "unprotect", str(files[algorithm]), "-o", str(back), "--key",
                 str(files["folder"] / algorithm)]) == 0
    assert back.read_bytes() == files["model"].read_bytes()
    assert "decrypted and authenticated" in capsys.readouterr().out
    mode = stat.S_IMODE((files["folder"] / algorithm).stat().st_mode)
    assert mode == 0o600                           # the private key: its owner's only


def _refused(argv: list[str], capsys, path, text: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert_one_line_error(2, err, "codec", str(path))
    assert text in err, err


def test_refusals_are_one_line(files, tmp_path, capsys):
    folder, out = files["folder"], str(tmp_path / "out")
    _refused(["codec", "unprotect", str(files["rsa"]), "-o", out, "--key", str(folder / "sm2")], capsys,
             files["rsa"], "asymalgno = '1 (RSA-OAEP-SHA256)'")
    _refused(["codec", "unprotect", str(files["rsa"]), "-o", out, "--key", str(folder / "rsa.pub")], capsys,
             folder / "rsa.pub", "a private key (unprotect takes NAME")
    _refused(["codec", "protect", str(files["model"]), "-o", out, "--key", str(folder / "rsa")], capsys,
             folder / "rsa", "a public key (protect takes NAME.pub")
    _refused(["codec", "unprotect", str(files["model"]), "-o", out, "--key", str(folder / "rsa")], capsys,
             files["model"], "a plain .nnr container, not a protected one")
    _refused(["codec", "keygen", "-o", str(folder / "rsa")], capsys, "-o", "keygen never overwrites a key")
    _refused(["codec", "keygen", "--bits", "1000", "-o", str(tmp_path / "k")], capsys, "--bits",
             "a multiple of 8 in 2048 .. 16384")
    assert not (tmp_path / "out").exists()


def test_a_stranger_cannot_unprotect(files, tmp_path, capsys):
    stranger = tmp_path / "stranger"
    assert main(["codec", "keygen", "--algorithm", "sm2", "-o", str(stranger)]) == 0
    _refused(["codec", "unprotect", str(files["sm2"]), "-o", str(tmp_path / "out"), "--key", str(stranger)],
             capsys, files["sm2"], "the private key does not unwrap it")


@pytest.mark.parametrize("profile", profiles(quick=40, long=2000))
@pytest.mark.parametrize("kind", ["model", "key"])
def test_fuzz_unprotect(profile, kind, files, tmp_path, sandbox):
    """A protected file (or a private key) truncated or with bytes overwritten: refused in one line, or, where
    the damage left the bytes (or the key) as they were, the model back."""
    sources = {algorithm: (files[algorithm] if kind == "model" else files["folder"] / algorithm).read_bytes()
               for algorithm in ("rsa", "sm2")}
    strategy = st.sampled_from(["rsa", "sm2"]).flatmap(
        lambda algorithm: st.tuples(st.just(algorithm), mangled_bytes(sources[algorithm])))
    fuzz(profile, strategy, lambda case: _check_damaged(sandbox, files, tmp_path, kind, *case, sources))


def _check_damaged(box, files, tmp_path, kind: str, algorithm: str, content: bytes, sources: dict) -> None:
    damaged = tmp_path / f"damaged.{kind}"
    damaged.write_bytes(content)
    model, key = (damaged, files["folder"] / algorithm) if kind == "model" else (files[algorithm], damaged)
    output = tmp_path / "out.nnr"
    output.unlink(missing_ok=True)
    code, _, err = run_case(box, run_cli, ["codec", "unprotect", str(model), "-o", str(output), "--key", str(key)])
    if content == sources[algorithm] or kind == "key" and code == 0:   # a key file may differ, the key not (hex case)
        assert code == 0 and output.read_bytes() == files["model"].read_bytes(), err
        return
    # a damaged key that still reads as a key is another key: then the model is the file refused
    named = str(damaged) if err.startswith(f"aipu codec: error: {damaged}") else str(model)
    assert_one_line_error(code, err, "codec", named)
    assert not output.exists()
