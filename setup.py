"""Build of kbear's optional C extension (everything else is in pyproject.toml).

``kbear._cdispatch`` (kbear/_dispatch.c) is the compiled RoutedProducer.produce() and
RoutedConsumer.poll()/consume() over several clusters, and (kbear/_pending.c) the
record a RoutedProducer keeps of a message for the take-back of #27 item 3, and
(kbear/_counted.c) the count of the messages a consumer returns, with metrics on. It is
optional: without a working C compiler (or Python headers) the build warns and goes
on, and kbear uses its pure-Python code (kbear.dispatcher() says which one is active).
"""

from setuptools import Extension, setup

SOURCES = ["kbear/_dispatch.c", "kbear/_pending.c", "kbear/_counted.c"]

setup(ext_modules=[Extension("kbear._cdispatch", SOURCES, optional=True)])
