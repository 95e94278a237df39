"""Build of kbear's optional C extension (everything else is in pyproject.toml).

``kbear._cdispatch`` (kbear/_dispatch.c) is the compiled RoutedProducer.produce() and
RoutedConsumer.poll()/consume() over several clusters, and (kbear/_pending.c) the
record a RoutedProducer keeps of a message for the take-back of #27 item 3, and
(kbear/_counted.c) the count of the messages a consumer returns, with metrics on. It is
optional: without a working C compiler (or Python headers) the build says so in one
line and goes on, and kbear uses its pure-Python code (kbear.dispatcher() says which
one is active).
"""

import sys

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

#: extensions that could not be compiled in this build (their names)
NOT_BUILT: list[str] = []

SOURCES = ["kbear/_dispatch.c", "kbear/_pending.c", "kbear/_counted.c"]


class OptionalBuildExt(build_ext):
    """build_ext that falls back to kbear's pure-Python code in one line of output
    when the extension cannot be compiled (setuptools' own optional=True prints
    the compiler's whole command line)."""

    def build_extension(self, ext: Extension) -> None:
        if ext.name in NOT_BUILT:  # install_lib runs build_ext again: not tried, nor said, twice
            return
        try:
            super().build_extension(ext)
        except Exception as exc:  # no compiler, no Python.h, a compile error: all mean the same here
            NOT_BUILT.append(ext.name)
            text = str(exc)
            reason = "the C compiler is missing or failed" if text.startswith("Command") else text[:100]
            print(
                f"kbear: the compiled dispatcher was not built: {reason} "
                f"({type(exc).__name__}); kbear will run its pure-Python dispatcher",
                file=sys.stderr,
            )


class BdistWheel(bdist_wheel):
    """bdist_wheel whose wheel is tagged pure Python (py3-none-any) when the extension
    was not built: a wheel holding no compiled module installs on any platform."""

    def run(self) -> None:
        self.run_command("build")  # run once: bdist_wheel's own run() does not build again
        if NOT_BUILT:
            self.root_is_pure = True
        super().run()


setup(
    ext_modules=[Extension("kbear._cdispatch", SOURCES, optional=True)],
    cmdclass={"build_ext": OptionalBuildExt, "bdist_wheel": BdistWheel},
)
