"""The lock tools of the ``redlease`` command, one module per subcommand.

:mod:`~redlease.commands.run` (a distributed flock), :mod:`~redlease.commands.ls`
(``ls`` and ``show``), :mod:`~redlease.commands.release` (``release --force``) and
:mod:`~redlease.commands.server` (a private server in the foreground); each offers a
``register(subparsers)`` that :mod:`redlease.cli` calls. What they share (exit codes,
reaching a server, option types) is in :mod:`~redlease.commands.common`.
"""
