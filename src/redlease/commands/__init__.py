"""The lock tools of the ``redlease`` command, one module per subcommand.

:mod:`~redlease.commands.run` (a distributed flock, with the command line cut by
:mod:`~redlease.commands.command_line`), :mod:`~redlease.commands.ls` (``ls`` and
``show``), :mod:`~redlease.commands.top` (the live view, with its bookkeeping in
``top_model`` and its drawing in ``top_view``), :mod:`~redlease.commands.release`
(``release --force``) and :mod:`~redlease.commands.server` (a private server in the
foreground); each offers a ``register(subparsers)`` that :mod:`redlease.cli` calls. What
they share (exit codes, reaching a server, option types) is in
:mod:`~redlease.commands.common`, how they talk (log lines, a closed pipe) in
:mod:`~redlease.commands.output`, and what the server says about a name in
:mod:`~redlease.commands.state`.
"""
