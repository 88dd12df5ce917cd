"""Import a script of tools/ (not a package) as a module, for the tests of tools/."""

import importlib.util
import sys
from types import ModuleType

from testpaths import ROOT


def load_tool(name: str) -> ModuleType:
    """tools/{name}.py as the module `name` (registered in sys.modules: dataclasses and pickle
    look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"tools/{name}.py"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
