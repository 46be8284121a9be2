"""The ``s2s`` command line: an argparse dispatcher for the subcommands.

Owns: the top-level parser, ``--version``, logging set-up for the command line, and the
registration of subcommands. Each subcommand module exposes ``register(subparsers)``, adds its
parser(s) and sets ``func`` (via ``set_defaults(func=...)``) to a callable taking the parsed
namespace and returning an int exit status:

* ``pyspark_s2s.server.cli``       -- ``serve``
* ``pyspark_s2s.client.commands``  -- ``send``, ``receive``, ``peers``
* ``pyspark_s2s.client.doctor``    -- ``doctor``

Global flags (``-v``/``--verbose``, ``--version``) are accepted before and after the
subcommand alike (``s2s -v serve`` = ``s2s serve -v``). Nothing a user types ends in a
traceback: a :class:`~pyspark_s2s.errors.CommandError` (and any other exception, as the last
resort) becomes one line ``s2s <command>: <reason>`` on stderr; exit statuses are 0 success,
1 failure, 2 usage error (argparse, :class:`~pyspark_s2s.errors.UsageError`), 130 interrupted.

Must not import at module level: the client, the server, pyspark, or any third-party package
(``import pyspark_s2s.cli`` stays cheap; the subcommand modules are imported inside
:func:`main`). A subcommand module that does not exist yet is skipped, so the command works
while the project is being built.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from pyspark_s2s import __version__

__all__ = ["SUBCOMMAND_MODULES", "build_parser", "ensure_directory", "main", "one_line", "os_reason"]

logger = logging.getLogger(__name__)

#: modules whose ``register(subparsers)`` adds subcommands, in help order
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "pyspark_s2s.server.cli",
    "pyspark_s2s.client.commands",
    "pyspark_s2s.client.doctor",
)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors name a misspelled flag first, with the closest real
    one (``--prot-name``: "did you mean --port-name?"). Plain argparse reports a missing required
    argument before an unknown one, so the misspelling itself would never be mentioned."""

    _s2s_args: tuple[str, ...] = ()

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._s2s_args = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def unknown_flag(self, tokens: Sequence[str] | None = None) -> str | None:
        """'unrecognized argument --x; did you mean --y?' for the first flag this parser does not
        know (among ``tokens``, default: the arguments it was given), or None."""
        known = [o for o in self._option_string_actions if o.startswith("--")]
        for token in self._s2s_args if tokens is None else tokens:
            if token == "--":
                break
            flag = token.split("=", 1)[0]
            if not flag.startswith("--") or flag in self._option_string_actions:
                continue
            if any(o.startswith(flag) for o in known):  # an abbreviation argparse accepts or calls ambiguous
                continue
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            return f"unrecognized argument {flag}" + (f"; did you mean {close[0]}?" if close else "")
        return None

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            better = self.unknown_flag(message.split(": ", 1)[1].split())
        else:
            better = self.unknown_flag()
        super().error(better or message)


def _missing(exc: ModuleNotFoundError, module: str) -> bool:
    """True when *exc* says that *module* itself (or a package on its path) does not exist.

    A ModuleNotFoundError raised for anything else (say, a third-party dependency the module
    imports) is a real error and must not be hidden.
    """
    name = exc.name or ""
    return name == module or module.startswith(name + ".")


def build_parser(modules: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered.

    *modules* defaults to :data:`SUBCOMMAND_MODULES`.
    """
    if modules is None:
        modules = SUBCOMMAND_MODULES
    parser = _Parser(
        prog="s2s",
        description="Apache NiFi Site-to-Site over HTTP(S): reference server and client commands.",
    )
    _add_global_flags(parser, "s2s_verbosity")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not _missing(exc, module_name):
                raise
            logger.debug("subcommand module %s is not available yet", module_name)
            continue
        module.register(subparsers)
    for sub in {id(p): p for p in subparsers.choices.values()}.values():
        _add_global_flags(sub, "s2s_sub_verbosity")
    return parser


def _add_global_flags(parser: argparse.ArgumentParser, verbosity_dest: str) -> None:
    """``--version`` and ``-v``; the subcommand's count goes to its own dest and is added to
    the top-level one (so ``s2s -v serve -v`` is ``-vv``)."""
    parser.add_argument("--version", action="version", version=f"s2s {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, dest=verbosity_dest,
                        help="log more (-v: info, -vv: debug); logs go to stderr")


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``s2s`` command; returns the process exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # the subcommand's parser knows its flags: it names the misspelled one
        sub = next((a.choices.get(args.command) for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction)), None)
        (sub if isinstance(sub, _Parser) else parser).error(f"unrecognized arguments: {' '.join(extra)}")
    _configure_logging(args.s2s_verbosity + getattr(args, "s2s_sub_verbosity", 0))
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    from pyspark_s2s.errors import CommandError

    name = f"s2s {args.command}"
    try:
        status = func(args)
    except KeyboardInterrupt:
        print("s2s: interrupted", file=sys.stderr)
        return 130
    except CommandError as exc:
        print(f"{name}: {one_line(str(exc))}", file=sys.stderr, flush=True)
        return exc.exit_status
    except Exception as exc:  # the last resort: a user never sees a traceback
        logger.debug("%s failed", name, exc_info=True)
        print(f"{name}: unexpected {type(exc).__name__}: {one_line(str(exc))} (-vv shows where)",
              file=sys.stderr, flush=True)
        return 1
    return int(status or 0)


def os_reason(exc: BaseException) -> str:
    """An OS error as a user reads it: ``No such file or directory: /x`` (no errno, no class name)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return str(exc) or type(exc).__name__


def ensure_directory(path: str, flag: str) -> None:
    """Create the directory given with ``flag`` if needed; a CommandError naming the flag when it
    cannot be created, is not a directory or cannot be written."""
    from pyspark_s2s.errors import CommandError

    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"{flag} {path}: cannot create the directory: {os_reason(exc)}") from None
    if not os.path.isdir(path):
        raise CommandError(f"{flag} {path}: not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise CommandError(f"{flag} {path}: the directory is not writable")


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) as one blank."""
    return " ".join(text.split())


if __name__ == "__main__":  # pragma: no cover - exercised through `python -m pyspark_s2s`
    sys.exit(main())
