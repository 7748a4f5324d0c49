"""What the start-up hook does, and the watcher that installs at ``import torch``.

Note [Start-up hook]
  Users switch tensorpager on with no code change:
  ``PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:12GiB" python train.py``.
  At interpreter start (``tensorpager.pth``), ``activate``:

  1. moves tensorpager's entries out of ``PYTORCH_ALLOC_CONF`` /
     ``PYTORCH_CUDA_ALLOC_CONF`` into ``TENSORPAGER_CONF`` before PyTorch can
     see (and reject) them: Note [Sharing PYTORCH_CUDA_ALLOC_CONF] in
     ``_conf.py``;
  2. if ``TENSORPAGER_CONF`` is then set (by step 1 or by the user; an empty
     value means every default), puts a finder at the front of
     ``sys.meta_path`` that waits for ``import torch``. When torch's
     ``__init__`` has finished executing, it calls ``tensorpager.install()``
     with ``TENSORPAGER_CONF``: after torch is usable, before user code can
     allocate anything.

  Before step 1, when tensorpager is the backend, PyTorch's own entries of
  those variables are checked (Note [Checking PyTorch's entries] in
  ``_torch_alloc_conf.py``): a variable PyTorch could not read, or with a key
  neither tensorpager nor PyTorch knows, is taken out of the environment and
  ``import torch`` raises ValueError naming it, before torch runs.

  ``TENSORPAGER_DISABLE=1`` keeps step 1's clean-up of PyTorch's variables (so
  PyTorch runs with its own allocator) and skips everything else.

  Failures: before torch is imported, anything that goes wrong is one line on
  stderr prefixed ``tensorpager:`` and the interpreter carries on. At
  ``import torch`` the user has asked for tensorpager, so an error (a bad
  configuration: ValueError; a missing extension: ImportError) propagates out
  of ``import torch``, with a line saying where the configuration came from
  and that ``TENSORPAGER_DISABLE=1`` turns tensorpager off.

Imports only ``os``/``sys``-level modules and ``tensorpager._conf``.
"""

from __future__ import annotations

import sys

from tensorpager import _conf, _keys, _torch_alloc_conf

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, MutableMapping

#: Where TENSORPAGER_CONF's entries came from, for error messages.
origin: str = _keys.ENV_CONF


def _notice(line: str) -> None:
    sys.stderr.write(f"tensorpager: {line}\n")


def activate(environ: MutableMapping[str, str]) -> None:
    """Runs Note [Start-up hook] against environ (normally ``os.environ``)."""
    global origin
    refused = None if _conf.is_disabled(environ) else _torch_alloc_conf.take_unreadable(environ)
    before = {var: environ.get(var) for var in _keys.ENV_ALLOC_CONFS}
    for line in _conf.move_alloc_conf_keys(environ):
        _notice(line)
    if refused is not None:
        watch_import("torch", lambda: _refuse(*refused), before=True)
        return
    if _conf.is_disabled(environ) or _keys.ENV_CONF not in environ:
        return
    moved_from = [var for var, value in before.items() if environ.get(var) != value]
    if moved_from:
        origin = f"{' and '.join(moved_from)} (moved to {_keys.ENV_CONF} at start-up)"
    if "torch" in sys.modules:  # imported before this hook ran (explicit import of _startup)
        install_from_environment(environ)
    else:
        watch_import("torch", lambda: install_from_environment(environ))


def _refuse(var: str, message: str) -> None:
    raise ValueError(
        f"tensorpager: {message}\ntensorpager: {var} was taken out of the environment so that PyTorch"
        f" does not read it; fix it, or set {_keys.ENV_DISABLE}=1 to run with PyTorch's own allocator."
    )


def install_from_environment(environ: MutableMapping[str, str]) -> None:
    """Installs tensorpager with ``TENSORPAGER_CONF``; errors say where it came from."""
    from tensorpager import _install

    conf = environ.get(_keys.ENV_CONF, "")
    try:
        _install.install(conf)  # also acts on the timeline, compress and record_trace keys
    except (ValueError, ImportError) as e:
        hint = (
            f"tensorpager: the configuration came from {origin}: '{conf}'. Set"
            f" {_keys.ENV_DISABLE}=1 to run with PyTorch's own allocator."
        )
        if hasattr(e, "add_note"):  # Python 3.11+
            e.add_note(hint)
            raise
        raise type(e)(f"{e}\n{hint}") from e
    from tensorpager import _managed

    _managed.report_peak_at_exit_if_unmanaged()


class _ImportWatcher:
    """A ``sys.meta_path`` finder that runs a callback once a module has executed.

    It finds nothing itself: for its module it asks the finders after it for
    the spec and wraps that spec's loader so that the callback runs once the
    module's code has finished. The loader object is kept (its
    ``exec_module`` is restored), so ``module.__spec__.loader`` is the real
    one. It leaves ``sys.meta_path`` when the callback runs, not on the first
    lookup: libraries probe with ``importlib.util.find_spec("torch")`` long
    before they import it.
    """

    def __init__(self, name: str, callback: Callable[[], None], before: bool = False) -> None:
        self._name = name
        self._callback = callback
        self._before = before
        self._fired = False

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001, ANN201 (importlib's protocol)
        if fullname != self._name or self._fired:
            return None
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is not None and hasattr(spec.loader, "exec_module"):
            _run_after_exec(spec.loader, self._fire, before=self._before)
        return spec

    def _fire(self) -> None:
        if self._fired:
            return
        self._fired = True
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        self._callback()


def _run_after_exec(loader: object, callback: Callable[[], None], before: bool = False) -> None:
    """Runs callback once loader has executed its module (before: instead of executing it
    when callback raises, else before executing it)."""
    original = loader.exec_module  # type: ignore[attr-defined]

    def exec_module(module: object) -> None:
        try:
            if before:
                callback()
            original(module)
        finally:
            try:
                del loader.exec_module  # type: ignore[attr-defined]
            except AttributeError:
                pass
        if not before:
            callback()

    try:
        loader.exec_module = exec_module  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        _notice(f"cannot watch the import of torch (loader {type(loader).__name__}); call"
                f" tensorpager.install() after 'import torch'")


def watch_import(name: str, callback: Callable[[], None], *, before: bool = False) -> None:
    """Runs callback once, right after module name is first imported (before: right before
    its code runs, so that an exception from callback is what the import raises)."""
    sys.meta_path.insert(0, _ImportWatcher(name, callback, before))
