"""A PEP 517 backend for `pip install ./python`: runs every hook of scikit-build-core in the
checkout's top directory (../pyproject.toml defines the package), with the output directories
made absolute first. Not part of the installed package."""
import contextlib
import os

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextlib.contextmanager
def _at_root():
    if not os.path.isfile(os.path.join(_ROOT, "pyproject.toml")):
        raise RuntimeError("python/ is built from the checkout's top directory (%s has no pyproject.toml): "
                           "run pip from a full checkout, or pip install the sdist" % _ROOT)
    cwd = os.getcwd()
    os.chdir(_ROOT)
    try:
        yield
    finally:
        os.chdir(cwd)


def _delegate(name):
    def hook(*args, **kwargs):
        import scikit_build_core.build as backend

        args = [os.path.abspath(a) if isinstance(a, str) else a for a in args]  # the directories
        kwargs = {k: os.path.abspath(v) if isinstance(v, str) else v for k, v in kwargs.items()}
        with _at_root():
            return getattr(backend, name)(*args, **kwargs)

    hook.__name__ = name
    return hook


for _name in ("build_wheel", "build_sdist", "get_requires_for_build_wheel", "get_requires_for_build_sdist",
              "prepare_metadata_for_build_wheel"):
    globals()[_name] = _delegate(_name)
