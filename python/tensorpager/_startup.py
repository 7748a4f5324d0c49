"""Interpreter start-up hook: ``tensorpager.pth`` holds ``import tensorpager._startup``.

It runs in every interpreter of the environment, so it imports nothing heavy
(no torch, no extension) and never lets a failure escape: a program that does
not use torch must run as if tensorpager were absent. What it does is in
``tensorpager._import_hook`` (Note [Start-up hook]).
"""


def _run() -> None:
    import os
    import sys

    try:
        from tensorpager import _import_hook

        _import_hook.activate(os.environ)
    except Exception as e:  # noqa: BLE001  (the interpreter must start whatever happens)
        sys.stderr.write(f"tensorpager: start-up hook failed, continuing without it: {e!r}\n")


_run()
