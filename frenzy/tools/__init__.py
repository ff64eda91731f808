"""Developer and user tools on top of Frenzy: the `frenzy` command, `frenzy up`'s local cluster,
the embedded broker, the demo, the security fuzzer and the protobuf generator.

Tools sit above everything else: they use the runtime (`frenzy.*`) and the SDK (`frenzy.client`,
`frenzy.pipeline`), and reach the services only as processes (`python -m frenzy_scheduler`, ...)
or, for the services' own subcommands, through the `frenzy` command's lazy table
(`frenzy.tools.cli.LAZY_COMMANDS`). Nothing below imports from here
(tests/test_layering.py).
"""
