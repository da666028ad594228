"""How the `mjfl` command line is spelled: list options, earlier spellings, default sub-commands.

One syntax for lists: an option that takes several values takes one
comma-separated value (``--fleet-sizes 100,1000``, ``--models lenet5,vgg6``),
read by ``comma_list``; ``LISTS`` names every such option. Such an option
given twice, or followed by more values separated by spaces, is an error
naming the option, never a silent choice of one of the values.

One meaning per flag: where a flag changed its name (``--devices`` once
meant fleet sizes, device ids, devices per step and a count), the old
spelling is refused with the new one (``RENAMED``), never reinterpreted.

The command line is parsed by click; nothing here rewrites it, except that
a ``DefaultRun`` group runs its ``run`` command when its first argument
names none of its commands (`mjfl profile CONFIG` is `mjfl profile run CONFIG`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from mjfl.errors import UserError

T = TypeVar("T")

# Every list option, with an example of its value (shown in errors).
LISTS: dict[str, str] = {
    "--methods": "meta-greedy,random",
    "--models": "lenet5,vgg6",
    "--fleet-sizes": "100,1000",
    "--devices-per-step": "1,8,32,128",
    "--backends": "local,ray",
    "--device-ids": "pixel-7,emu-lab-0",
    "--dns-names": "coordinator.lab,coordinator",
    "--ip-addresses": "10.0.0.5,192.168.1.20",
    "--input-shape": "1,28,28",
}

# Spellings of earlier versions that scripts may hold, by command: each is refused with what to write now.
RENAMED: dict[str, dict[str, str]] = {
    "profile run": {"--devices": "--device-ids ID,ID (device ids, one comma-separated list)"},
    "bench schedulers": {"--devices": "--fleet-sizes 100,1000 (fleet sizes, one comma-separated list)"},
    "bench scale": {"--devices": "--fleet-sizes 20,100,500 (fleet sizes, one comma-separated list)"},
    "bench trainers": {"--devices": "--devices-per-step 1,8,32,128"},
    "bench gpu": {"--devices": "--devices-per-step 1,8,32,128"},
    "devices check": {"--timeout": "--timeout-s SECONDS (seconds are -s everywhere, as bench faults' --timeout-s)"},
    "certs create": {
        "--host": "--dns-names NAME,NAME (--host is an address to listen on elsewhere)",
        "--ip": "--ip-addresses ADDR,ADDR",
    },
}


def comma_list(flag: str, text: str, convert: Callable[[str], T] = str) -> list[T]:  # type: ignore[assignment]
    """The items of list option ``flag``: ``text`` split at commas, blanks around items dropped ("" holds none)."""
    try:
        return [convert(item.strip()) for item in text.split(",") if item.strip()]
    except ValueError:
        raise UserError(f"{flag} {text!r}: give one comma-separated list, e.g. {flag} {LISTS[flag]}") from None


class Command(TyperCommand):
    """A command that refuses earlier spellings, a list option given twice, and values left over.

    Left-over values come back from click's parser (``allow_extra_args``) so
    the error can name the list option they follow: ``--models lenet5 vgg6``.
    """

    allow_extra_args = True

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes ``args``
        if not ctx.resilient_parsing:  # shell completion parses half-typed lines
            self._check_spellings(_path(ctx), given)
        rest = super().parse_args(ctx, args)
        if rest and not ctx.resilient_parsing:
            raise UserError(_left_over(given, rest))
        return rest

    def _check_spellings(self, path: str, args: Sequence[str]) -> None:
        flags = _flags(args)
        for old, new in RENAMED.get(path, {}).items():
            if old in flags:
                raise UserError(f"mjfl {path} {old}: now {new}")
        ours = {opt for param in self.params for opt in param.opts}
        for flag in LISTS.keys() & ours:
            if flags.count(flag) > 1:
                raise UserError(f"{flag} is given {flags.count(flag)} times: give one comma-separated list,"
                                f" e.g. {flag} {LISTS[flag]}")


class DefaultRun(TyperGroup):
    """A group whose first argument, when it names none of its commands, goes to its ``run`` command."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ctx.help_option_names):
            args = ["run", *args]
        return super().parse_args(ctx, args)


class Typer(typer.Typer):
    """A typer app whose commands are ``Command``s."""

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("cls", Command)
        return super().command(*args, **kwargs)


def _path(ctx: Any) -> str:
    """The command's names below `mjfl`, e.g. "bench schedulers"."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(reversed(names))


def _flags(args: Sequence[str]) -> list[str]:
    """The long options of ``args`` (``--flag`` or ``--flag=value``), up to a ``--``."""
    flags = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--"):
            flags.append(arg.split("=", 1)[0])
    return flags


def _left_over(args: Sequence[str], rest: Sequence[str]) -> str:
    """The error for values no option or argument took: the list option they follow, if one."""
    extra = " ".join(rest)
    for n, arg in enumerate(args[:-2]):
        if arg in LISTS and not args[n + 2].startswith("-"):
            return (f"{arg} takes one comma-separated list, e.g. {arg} {LISTS[arg]}, not values separated by"
                    f" spaces ({extra} left over)")
    return f"unexpected argument(s): {extra}"
