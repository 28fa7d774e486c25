"""The ``ampsuite-venv`` asv environment: a virtualenv per torch build that installs only ampsuite.

asv's stock virtualenv environments install every dependency per commit; for a
CUDA torch that is gigabytes per commit, and it needs the network. This
environment instead:

- creates one virtual environment (stdlib ``venv``, no pip of its own) whose
  ``.pth`` file adds the site-packages of the interpreter that runs asv, the way
  ``--system-site-packages`` does, but also when that interpreter is itself a
  virtualenv. torch, torchvision, pluggy, jinja2, pip, setuptools and asv_runner
  come from there and are never reinstalled;
- per commit, builds a wheel of the checkout and installs it with
  ``pip --no-deps --no-build-isolation --no-index``, into the venv's own
  site-packages, which come first on ``sys.path``: the commit's ampsuite shadows
  any ampsuite installed in the base interpreter. pip never reaches the network;
- reads the ``req`` entries of asv's ``matrix`` (``{"req": {"torch": ""}}`` in
  ampsuite's ``asv.conf.json``) as packages *taken from the base interpreter*:
  never installed, but recorded with the version found (``""`` accepts any, a
  version or specifier must match). The version is the module's
  ``__version__`` where that refines the distribution's (torch's CUDA builds
  say ``2.4.1+cu124`` there, and may say only ``2.4.1`` in their metadata). The version becomes part of the environment
  name and of the parameters of every result, so a new torch starts a new
  series in ``asv publish`` and ``asv compare`` instead of extending the old one.

The GPU, driver and CUDA version are facts of the machine and go into asv's
machine file (:mod:`ampsuite.asvtools.machine`).

``asv.conf.json`` may still set ``build_command``, ``install_command`` or
``uninstall_command``; only where it does not do the defaults below apply.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from asv import environment, util
from asv.console import log
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["CHECKOUT_ENV", "TOOL_NAME", "AmpsuiteVenv"]

TOOL_NAME = "ampsuite-venv"
CHECKOUT_ENV = "AMPSUITE_ASV_CHECKOUT"
"""Set for every command run in the environment: the checkout of the commit being measured."""

PTH_FILE = "_ampsuite_base_site.pth"

MIN_SETUPTOOLS = 77
"""pyproject.toml's [build-system] requires this setuptools (the SPDX string form of project.license)."""
BUILD_COMMAND = ["python -m pip wheel --no-deps --no-build-isolation --no-index -w {build_cache_dir} {build_dir}"]
INSTALL_COMMAND = ["in-dir={env_dir} python -m pip install --no-deps --no-index --force-reinstall {wheel_file}"]
UNINSTALL_COMMAND = ["return-code=any python -m pip uninstall -y {project}"]

# pip must neither look for a newer pip nor consult an index, wherever it is called from.
PIP_OFFLINE = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1", "PIP_NO_INPUT": "1"}

_PROBE = r"""
import importlib, importlib.metadata as md, json, os, sys
names = json.loads(sys.argv[1])
site = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]
versions = {}
for name in names:
    try:
        versions[name] = md.version(name)
    except md.PackageNotFoundError:
        versions[name] = None
        continue
    try:  # torch's metadata may say 2.4.1 where torch.__version__ says 2.4.1+cu124
        module_version = getattr(importlib.import_module(name.replace("-", "_")), "__version__", None)
    except Exception:
        module_version = None
    if isinstance(module_version, str) and module_version.split("+")[0] == versions[name].split("+")[0]:
        versions[name] = module_version
print(json.dumps({"site": site, "versions": versions, "python": "%d.%d" % sys.version_info[:2]}))
"""


def find_python(python: str) -> str | None:
    """The interpreter for asv's ``python`` spec ``X.Y``: the one running asv when it
    has that version (it is the one with torch installed), else ``pythonX.Y`` on PATH."""
    if python == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return sys.executable
    try:
        return str(util.which(f"python{python}"))
    except OSError:
        return None


def probe(executable: str, names: list[str]) -> dict[str, Any]:
    """Ask ``executable`` for its site-packages folders and the versions of ``names``."""
    out = subprocess.run(
        [executable, "-c", _PROBE, json.dumps(names)], capture_output=True, text=True, timeout=120, cwd=os.sep
    )
    if out.returncode != 0:
        raise environment.EnvironmentUnavailable(f"{executable} failed to report its packages: {out.stderr[-500:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])  # after anything an import printed
    return result


def version_matches(found: str, wanted: str) -> bool:
    """``wanted`` is ``""`` (any), a specifier (``>=2.4,<3``) or a version; a plain
    version also matches a build of it with a local tag (``2.4.1`` matches ``2.4.1+cu124``)."""
    wanted = wanted.strip()
    if not wanted:
        return True
    try:
        if wanted[0] in "<>=!~":
            return SpecifierSet(wanted).contains(Version(found), prereleases=True)
        want = Version(wanted)
        have = Version(found)
        return have == want if want.local else have.public == want.public
    except (InvalidSpecifier, InvalidVersion):
        return found == wanted


def resolve_requirements(requirements: dict[str, str], found: dict[str, str | None], executable: str) -> dict[str, str]:
    """Each requirement's version as installed for ``executable``, checked against what asv.conf.json asks."""
    resolved = {}
    for name, wanted in requirements.items():
        have = found.get(name)
        if have is None:
            raise environment.EnvironmentUnavailable(
                f"{TOOL_NAME}: {name} is not installed for {executable}; this environment reuses the packages of the "
                "interpreter that runs asv (run asv with the python that has torch: `python -m asv ...`)"
            )
        if not version_matches(have, wanted or ""):
            raise environment.EnvironmentUnavailable(
                f"{TOOL_NAME}: asv.conf.json asks for {name} {wanted!r}, but {executable} has {name} {have}"
            )
        resolved[name] = have
    return resolved


class AmpsuiteVenv(environment.Environment):
    """A venv on top of the asv interpreter's packages, with only ampsuite installed per commit."""

    tool_name = TOOL_NAME
    matches_python_fallback = False

    def __init__(self, conf: Any, python: str, requirements: dict[str, str], tagged_env_vars: dict[Any, str]) -> None:
        executable = find_python(python)
        if executable is None:
            raise environment.EnvironmentUnavailable(f"{TOOL_NAME}: no interpreter found for python {python}")
        facts = probe(executable, sorted(requirements))
        self._executable = executable
        self._base_site: list[str] = list(facts["site"])
        # Environment.__init__ derives the environment's folder from these, so they come first.
        self._python = python
        self._requirements = resolve_requirements(dict(requirements), facts["versions"], executable)
        super().__init__(conf, python, self._requirements, tagged_env_vars)
        for attr, default in (
            ("_build_command", BUILD_COMMAND),
            ("_install_command", INSTALL_COMMAND),
            ("_uninstall_command", UNINSTALL_COMMAND),
        ):
            if getattr(self, attr) is None:  # asv.conf.json did not set it
                setattr(self, attr, list(default))

    @classmethod
    def matches(cls, python: str) -> bool:
        return re.fullmatch(r"\d+\.\d+", python) is not None and find_python(python) is not None

    # -- creation -------------------------------------------------------------

    def _pth_line(self) -> str:
        return "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in self._base_site) + "\n"

    def _site_packages(self) -> Path:
        out = util.check_output(
            [os.path.join(self._path, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
        )
        return Path(out.strip())

    def _setup(self) -> None:
        log.info(f"Creating {self.name}: a venv on {self._executable} that reuses its site-packages")
        util.check_call([self._executable, "-m", "venv", "--without-pip", self._path])
        (self._site_packages() / PTH_FILE).write_text(self._pth_line(), encoding="utf-8")
        needed = "('pip', 'asv_runner', 'setuptools')"
        missing = self.run(
            ["-c", f"import importlib.util as u; print(' '.join(m for m in {needed} if not u.find_spec(m)))"]
        ).strip()
        if missing:
            raise util.UserError(
                f"{TOOL_NAME}: {missing} not importable from {self._executable}; install it there "
                f"(`{self._executable} -m pip install {missing.replace('_', '-')}`)"
            )
        # The build has no isolation (offline): the interpreter's own setuptools builds each commit, and a venv of
        # Python 3.11 starts with one too old for pyproject.toml's SPDX license, which fails deep in pip's output.
        version = self.run(["-c", "import setuptools; print(setuptools.__version__)"]).strip()
        if int(version.split(".")[0] or 0) < MIN_SETUPTOOLS:
            raise util.UserError(
                f"{TOOL_NAME}: setuptools {version} of {self._executable} cannot build ampsuite (it needs >= "
                f"{MIN_SETUPTOOLS}); `{self._executable} -m pip install 'setuptools>={MIN_SETUPTOOLS}'`"
            )

    def check_presence(self) -> bool:
        """The stock check looks for a ``pip`` executable, which this venv has no need of."""
        try:
            info = self.load_info_file(self._path)
        except (util.UserError, OSError):
            return False
        expected = {
            "tool_name": self.tool_name,
            "python": self._python,
            "requirements": self._requirements,
            "build_env_vars": self.build_env_vars,
        }
        if info != expected:
            return False
        try:
            pth = self._site_packages() / PTH_FILE
        except (util.ProcessError, OSError):
            return False
        return pth.is_file() and pth.read_text(encoding="utf-8") == self._pth_line()

    # -- running --------------------------------------------------------------

    def run_executable(self, executable: str, args: list[str], **kwargs: Any) -> Any:
        env = dict(kwargs.pop("env", None) or os.environ)
        env.update(PIP_OFFLINE)
        env[CHECKOUT_ENV] = self._build_root
        return super().run_executable(executable, args, env=env, **kwargs)

    def run(self, args: list[str], **kwargs: Any) -> Any:
        log.debug(f"Running '{' '.join(args)}' in {self.name}")
        return self.run_executable("python", args, **kwargs)
