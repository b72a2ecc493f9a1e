"""``tony minicluster``'s command line (:mod:`tony_workflow.minicluster.cli`) where no cluster is
needed: its commands and the refusal of what it does not take."""
from __future__ import annotations

import pytest

from tony_workflow.minicluster.cli import build_parser, main


def test_every_command_is_there():
    parser = build_parser()
    for argv in (["start"], ["stop"], ["status"], ["env"], ["nodemanager", "list"], ["nodemanager", "stop", "--index", "1"]):
        assert callable(parser.parse_args(argv).fn), argv


def test_an_unknown_argument_is_refused_as_argparse_refuses(capsys):
    with pytest.raises(SystemExit) as e:
        main(["status", "--colour", "red"])
    assert e.value.code == 2 and "unrecognized arguments: --colour red" in capsys.readouterr().err
