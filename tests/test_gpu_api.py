"""Every cupy, cupyx, NCCL and NVML name ringlab uses exists in the real wheels, called the way we call it.

The real ``cupy-cuda12x``, ``nvidia-nccl-cu12`` and ``nvidia-ml-py`` import without a GPU (the
``gpu-check`` extra installs them). The names are found by reading ringlab's source, so a new
``cp.cuda.Something`` is checked without editing this file; the call sites' arguments are bound to
the real signatures where Python can read them. The CPU stand-in in tests/gpusim must not invent
API either: every public name it defines exists in the real wheel.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ringlab"
STANDIN = ROOT / "tests" / "gpusim"


def real(name: str):
    """The real module, never the stand-in (which only subprocesses see, but be sure)."""
    module = pytest.importorskip(name, reason=f"{name} is not installed (pip install -e '.[gpu-check]')")
    if STANDIN in Path(module.__file__).resolve().parents:
        pytest.skip(f"{name} here is the stand-in, not the real wheel")
    return module


# how a chain's first name (or first two) reaches a module in ringlab's code
ROOTS = {"cp": "cupy", "cupy": "cupy", "self.cp": "cupy", "cupyx": "cupyx", "pynvml": "pynvml",
         "nccl": "cupy.cuda.nccl", "runtime": "cupy.cuda.runtime"}
XP = "xp"  # numpy or cupy: only chains through .cuda are cupy's


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def uses() -> dict[str, list[tuple[str, ast.Call | None]]]:
    """Every name ringlab reaches in cupy, cupyx, NCCL and NVML: 'module.path' -> [(file:line, call or None)]."""
    found: dict[str, list] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        calls = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or id(node) in inner:
                continue  # only whole chains
            chain = _dotted(node)
            if chain is None:
                continue
            name = _resolve(chain)
            if name:
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                found.setdefault(name, []).append((where, calls.get(id(node))))
        for node in ast.walk(tree):  # from cupy.cuda import nccl, import cupyx.profiler ...
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("cupy", "cupyx"):
                for alias in node.names:
                    found.setdefault(f"{node.module}.{alias.name}", []).append(
                        (f"{path.relative_to(ROOT)}:{node.lineno}", None))
    return found


def _resolve(chain: str) -> str | None:
    for prefix, module in sorted(ROOTS.items(), key=lambda kv: -len(kv[0])):
        if chain == prefix or chain.startswith(prefix + "."):
            rest = chain[len(prefix):]
            return module + rest if rest else None
    if chain.startswith(XP + ".cuda."):
        return "cupy" + chain[len(XP):]
    return None


def lookup(name: str):
    """Follow a dotted name from its module; AttributeError names the first missing part."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        if module_name in ("cupy", "cupyx", "pynvml", "cupy.cuda", "cupy.cuda.runtime", "cupy.cuda.nccl"):
            obj = importlib.import_module(module_name)
            break
    else:
        raise AttributeError(name)
    for attr in parts[cut:]:
        obj = getattr(obj, attr)
    return obj


def test_the_scan_finds_what_ringlab_uses():
    names = uses()
    for expected in ("cupy.cuda.runtime.ipcOpenMemHandle", "cupy.cuda.runtime.cudaIpcMemLazyEnablePeerAccess",
                     "cupy.cuda.UnownedMemory", "cupy.cuda.Event", "cupy.cuda.get_elapsed_time",
                     "cupyx.empty_pinned", "pynvml.nvmlDeviceGetP2PStatus", "cupy.cuda.nccl.NcclCommunicator",
                     "cupy.cuda.ExternalStream"):
        assert expected in names, sorted(names)


def test_every_name_ringlab_uses_exists_in_the_real_wheels():
    real("cupy"), real("cupyx"), real("pynvml")
    from cupy.cuda import nccl

    missing = []
    for name, sites in sorted(uses().items()):
        if name.startswith("cupy.cuda.nccl.") and not getattr(nccl, "available", False):
            continue  # without libnccl the binding has none of its functions: checked below
        try:
            lookup(name)
        except AttributeError:
            missing.append(f"{name} (used at {', '.join(w for w, _ in sites)})")
    assert not missing, "not in the real wheels:\n" + "\n".join(missing)


def test_nccl_names_with_libnccl():
    real("cupy")
    from cupy.cuda import nccl

    if not getattr(nccl, "available", False):
        pytest.skip("cupy cannot load libnccl here (the gpu-check extra brings nvidia-nccl-cu12)")
    nccl_names = [n for n in uses() if n.startswith("cupy.cuda.nccl.")]
    assert nccl_names and all(lookup(n) is not None for n in nccl_names)
    assert len(nccl.get_unique_id()) == 128  # needs no GPU: what rank 0 broadcasts


def _signature(obj):
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        pass
    doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    name = getattr(obj, "__name__", "")
    if doc and re.match(rf"{re.escape(name)}\(.*\)", doc[0]):  # Cython's embedded signature
        text = re.sub(r"\)\s*(->.*)?$", ")", doc[0][len(name):])
        text = re.sub(r"\b(int|intptr_t|size_t|bool|str|object|unsigned|Stream|Event|dict)\s+(?=\w)", "", text)
        try:
            return inspect.signature(eval(f"lambda {text[1:-1]}: None", {"None": None, "True": True, "False": False}))
        except SyntaxError:
            return None
    return None


def test_calls_bind_to_the_real_signatures():
    """Each call's positional count and keyword names fit the real callable, where its signature can be read."""
    real("cupy"), real("pynvml")
    wrong, unread = [], set()
    for name, sites in sorted(uses().items()):
        try:
            obj = lookup(name)
        except AttributeError:
            continue  # reported by the test above
        for where, call in sites:
            if call is None or any(isinstance(a, ast.Starred) for a in call.args) or any(
                    k.arg is None for k in call.keywords):
                continue
            target = obj.__init__ if inspect.isclass(obj) and not _signature(obj) else obj
            signature = _signature(target)
            if signature is None:
                unread.add(name)
                continue
            if target is not obj and list(signature.parameters)[:1] == ["self"]:
                signature = signature.replace(parameters=list(signature.parameters.values())[1:])
            try:
                signature.bind(*range(len(call.args)), **{k.arg: None for k in call.keywords})
            except TypeError as err:
                wrong.append(f"{where}: {name}{signature}: {err}")
    assert not wrong, "calls that do not fit:\n" + "\n".join(wrong)
    print("signatures Python cannot read (checked by reading the sources):", ", ".join(sorted(unread)))


def test_the_call_shapes_the_gpu_code_relies_on():
    """What the docs say and the code assumes, checked where the wheel lets Python see it."""
    cupy = real("cupy")
    cupyx = real("cupyx")
    for obj, name, parameters in ((cupy.ndarray.get, "get", ("stream", "order", "out", "blocking")),
                                  (cupy.ndarray.set, "set", ("arr", "stream")),
                                  (cupyx.empty_pinned, "empty_pinned", ("shape", "dtype", "order"))):
        signature = _signature(obj)
        if signature is None:
            continue
        assert [p for p in signature.parameters if p != "self"][:len(parameters)] == list(parameters), (name, signature)


def _load_standin(module_name: str, path: Path):
    """Import a stand-in module under another name, so the real one stays in sys.modules."""
    saved = {k: sys.modules[k] for k in list(sys.modules) if k.split(".")[0] in ("cupy", "cupyx", "machines",
                                                                               "pynvml")}
    sys.path.insert(0, str(STANDIN))
    try:
        for k in saved:
            del sys.modules[k]
        spec = importlib.util.spec_from_file_location(module_name, path, submodule_search_locations=[str(path.parent)]
                                                      if path.name == "__init__.py" else None)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return module, {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("cupy", "cupyx", "pynvml")}
    finally:
        sys.path.remove(str(STANDIN))
        for k in [k for k in sys.modules if k.split(".")[0] in ("cupy", "cupyx", "machines", "pynvml")]:
            del sys.modules[k]
        sys.modules.update(saved)


def _public(module) -> list[str]:
    return [n for n in vars(module) if not n.startswith("_") and not isinstance(vars(module)[n], type(sys))
            and getattr(vars(module)[n], "__module__", module.__name__) is not None
            and n not in ("annotations",)]


def test_the_standin_invents_no_api():
    real("cupy"), real("cupyx"), real("pynvml")
    import cupy
    import cupyx
    import pynvml

    _, loaded = _load_standin("gpusim_cupy", STANDIN / "cupy" / "__init__.py")
    invented = []
    for standin_name, real_module in (("cupy", cupy), ("cupy.cuda", cupy.cuda), ("cupy.cuda.runtime", cupy.cuda.runtime),
                                      ("cupyx", cupyx)):
        module = loaded.get(standin_name)
        if module is None:
            continue
        for name in _public(module):
            value = vars(module)[name]
            if getattr(value, "__module__", "").startswith(("numpy", "__future__")) or name in ("np",):
                continue  # numpy's dtypes, which cupy re-exports too
            if not hasattr(real_module, name):
                invented.append(f"{standin_name}.{name}")
    nvml, _ = _load_standin("gpusim_pynvml", STANDIN / "pynvml.py")
    invented += [f"pynvml.{n}" for n in _public(nvml) if n != "machines" and not hasattr(pynvml, n)]
    assert not invented, f"the stand-in defines names the real wheels do not have: {invented}"
