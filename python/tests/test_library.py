"""Loading libtyr: lazily, from the package or $TYR_LIBRARY, at a compatible API version."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tyr

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=60, env=e)


def test_import_does_not_load(endpoint: str) -> None:
    r = run_python(
        f"""
        import tyr
        assert not tyr._lib.loaded(), "loaded at import"
        c = tyr.connect({endpoint!r}, timeout=30)
        assert tyr._lib.loaded()
        assert c.ready()
        print(tyr._lib.library_path())
        """
    )
    assert r.returncode == 0, r.stderr
    want = os.environ.get("TYR_LIBRARY") or str(Path(tyr.__file__).parent / "libtyr.so")
    assert os.path.realpath(r.stdout.strip()) == os.path.realpath(want)


def test_package_ships_the_library_without_its_header() -> None:
    pkg = Path(tyr.__file__).parent
    if os.environ.get("TYR_LIBRARY"):
        pytest.skip("TYR_LIBRARY names the library: the package's own copy is not the one tested")
    assert (pkg / "libtyr.so").is_file()
    assert not (pkg / "libtyr.h").exists()
    assert (pkg / "py.typed").is_file()


def test_tyr_library_overrides_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "libtyr.so"
    r = run_python(
        """
        import tyr
        try:
            tyr.connect("127.0.0.1:1")
        except tyr.Error as e:
            print(type(e).__name__, e)
        """,
        TYR_LIBRARY=str(missing),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Error ") and str(missing) in r.stdout


def test_old_api_version_is_refused(tmp_path: Path) -> None:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "old.c"
    src.write_text("int tyr_api_version(void) { return 0; }\n")
    lib = tmp_path / "libold.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    r = run_python(
        """
        import tyr
        try:
            tyr.connect("127.0.0.1:1")
        except tyr.Error as e:
            print(e)
        """,
        TYR_LIBRARY=str(lib),
    )
    assert r.returncode == 0, r.stderr
    assert "API version 0" in r.stdout


def test_public_names_are_documented() -> None:
    import inspect

    for name in tyr.__all__:
        obj = getattr(tyr, name)
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
            assert obj.__doc__, name
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                        assert member.__doc__, f"{name}.{attr}"
    for name in ("create", "write", "append", "truncate", "delete", "atomic", "cas"):
        assert getattr(tyr.ops, name).__doc__


def test_failed_calls_release_their_buffers(endpoint: str) -> None:
    # A failed call's traceback holds the caller's memoryview and the view
    # libtyr read through; caught into a local, the exception closes a
    # reference cycle. Collecting it must not find the memoryview still
    # exported (CPython 3.11 crashed on that).
    r = run_python(
        f"""
        import gc
        import tyr
        from tyr import ops

        c = tyr.connect({endpoint!r}, timeout=30)

        def fail(call):
            data = memoryview(b"abcd").cast("B")
            try:
                call(data)
            except tyr.NotFoundError as e:
                err = e  # frame -> err -> traceback -> frame
                return err
            raise AssertionError("the call did not fail")

        for call in (
            lambda d: c.put("no-such-keyspace", "k", d),
            lambda d: c.write("no-such-keyspace", "k", d),
            lambda d: c.append("no-such-keyspace", "k", d),
            lambda d: c.cas("no-such-keyspace", "k", 0, d, d),
            lambda d: c.commit("no-such-keyspace", [ops.write("k", 0, d)]),
        ):
            for _ in range(50):
                fail(call)
            gc.collect()
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def _header_check_source() -> str:
    """C that compiles only if the bindings' declarations match tyr.h."""
    from tyr import _lib

    ffi = _lib.ffi
    lines = ["#include <stddef.h>", '#include "tyr.h"']
    header = (REPO / "libtyr" / "tyr.h").read_text()
    # Constants: every one the bindings define under a name tyr.h has.
    for name, value in vars(_lib).items():
        if name.isupper() and isinstance(value, int) and re.search(rf"\bTYR_{name}\b", header):
            lines.append(f'_Static_assert(TYR_{name} == {value}u, "TYR_{name}");')
    # Structs: size, and each field's offset and size.
    for struct in re.findall(r"typedef struct (tyr_\w+) \{", _lib.CDEF):
        t = ffi.typeof(struct)
        lines.append(f'_Static_assert(sizeof({struct}) == {ffi.sizeof(t)}, "sizeof {struct}");')
        for field, f in t.fields:
            lines.append(
                f"_Static_assert(offsetof({struct}, {field}) == {f.offset} && "
                f'sizeof((({struct} *)0)->{field}) == {ffi.sizeof(f.type)}, "{struct}.{field}");'
            )
    # Functions: a pointer of the declared type takes the real function only
    # if every parameter and the result have the same types.
    for ret, name, params in re.findall(r"(?m)^([A-Za-z_][\w ]*?[\s*])(tyr_\w+)\(([^;]*?)\);", _lib.CDEF):
        lines.append(f"{ret.strip()} (*check_{name})({params}) = {name};")
    return "\n".join(lines) + "\n"


def test_bindings_match_the_header(tmp_path: Path) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler: the check of the bindings against tyr.h needs one (scripts/deps.sh installs gcc)"
    from tyr import _lib

    header = (REPO / "libtyr" / "tyr.h").read_text()
    declared = set(re.findall(r"(?m)^[A-Za-z_][\w ]*?[\s*](tyr_\w+)\(", header))
    bound = set(re.findall(r"(?m)^[A-Za-z_][\w ]*?[\s*](tyr_\w+)\(", _lib.CDEF))
    assert declared - bound == set(), "calls of tyr.h without a binding"
    assert bound - declared == set(), "bindings of calls tyr.h does not have"
    src = tmp_path / "check.c"
    src.write_text(_header_check_source())
    r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", str(REPO / "libtyr"), "-c", str(src),
                        "-o", str(tmp_path / "check.o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-4000:]
