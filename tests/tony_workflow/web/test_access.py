"""Who the history server lets in and what they see (:mod:`tony_workflow.web.access`): tokens from
the owner and from a tokens file (checked, read again when it changes, a bad edit refused), and
the view ACLs read as YARN reads them."""
from __future__ import annotations

import os

import pytest

from tony_workflow.web.access import TokenBook, TokenFileError, Viewer, groups_of, may_view

ALICE = "a" * 20
BOB = "b" * 20


def tokens_file(tmp_path, text: str, mode: int = 0o600):
    f = tmp_path / "tokens"
    f.write_text(text)
    f.chmod(mode)
    return f


def test_the_owner_and_the_files_users_are_known_by_their_tokens_and_nobody_else(tmp_path):
    book = TokenBook("svc", tokens_file(tmp_path, f"# who may sign in\nalice {ALICE}\n\nbob {BOB}\n"), admins=["ops"])
    assert len(book.owner_token) >= 24 and book.user_of(book.owner_token) == "svc"
    assert book.user_of(ALICE) == "alice" and book.user_of(BOB) == "bob"
    assert book.user_of("c" * 20) is None and book.user_of("") is None and book.user_of(None) is None
    assert book.viewer(book.owner_token).admin and not book.viewer(ALICE).admin
    assert TokenBook("svc", None, owner_token="t" * 30).user_of("t" * 30) == "svc"


def test_the_file_is_read_again_when_it_changes_and_a_bad_edit_keeps_the_last_good_one(tmp_path):
    f = tokens_file(tmp_path, f"alice {ALICE}\n")
    book = TokenBook("svc", f)
    assert book.user_of(BOB) is None
    f.write_text(f"alice {ALICE}\nbob {BOB}\n")
    os.utime(f, (1, 1))  # another mtime, however fast the edit came
    assert book.user_of(BOB) == "bob"
    f.write_text("bob\n")
    os.utime(f, (2, 2))
    assert book.user_of(BOB) == "bob"  # the broken file is not taken


@pytest.mark.parametrize("text,mode,message", [
    (f"alice {ALICE}\n", 0o644, "readable by others .*644.*chmod 600"),
    ("alice short\n", 0o600, "line 1: expected 'user token' with a token of at least 16"),
    (f"alice {ALICE} extra\n", 0o600, "line 1: expected 'user token'"),
    (f"alice {ALICE}\nbob {ALICE}\n", 0o600, "line 2: the token of bob is another user's too"),
])
def test_a_tokens_file_that_cannot_be_used_is_refused_naming_the_line(tmp_path, text, mode, message):
    with pytest.raises(TokenFileError, match=message):
        TokenBook("svc", tokens_file(tmp_path, text, mode))


def test_a_missing_tokens_file_is_named(tmp_path):
    with pytest.raises(TokenFileError, match=f"{tmp_path}/nope cannot be read"):
        TokenBook("svc", tmp_path / "nope")


def job(acls=((), ()), user="alice", submitter=None):
    return {"user": user, "submitter": submitter or user, "view_acls": acls}


@pytest.mark.parametrize("viewer,summary,allowed", [
    (Viewer("alice"), job(), True),                                   # their own
    (Viewer("bob"), job(), False),                                    # another's, no ACL
    (Viewer("svc"), job(submitter="svc"), True),                      # run as alice, submitted by svc
    (Viewer("bob"), job((("bob",), ())), True),                       # named by the ACL
    (Viewer("bob"), job((("*",), ())), True),                         # everyone
    (Viewer("bob", frozenset({"ml"})), job(((), ("ml",))), True),     # one of their groups
    (Viewer("bob", frozenset({"web"})), job(((), ("ml",))), False),
    (Viewer("ops", admin=True), job(), True),                         # the server's administrators
    (None, job(), True),                                              # the mounting app decides
])
def test_who_may_see_a_job(viewer, summary, allowed):
    assert may_view(viewer, summary) is allowed


def test_an_acl_the_summary_lacks_is_read_only_when_needed():
    asked = []

    def acls():
        asked.append(1)
        return (("bob",), ())

    assert may_view(Viewer("alice"), job(None), acls) and not asked
    assert may_view(Viewer("bob"), job(None), acls) and asked == [1]


def test_groups_are_this_machines():
    assert "root" in groups_of("root") and groups_of("no-such-user-here") == frozenset()


def test_a_kerberos_login_needs_a_keytab_that_is_there(tmp_path):
    from tony_workflow.web.access import Spnego, SpnegoError
    with pytest.raises(SpnegoError, match=f"the keytab {tmp_path}/none.keytab is not there"):
        Spnego(tmp_path / "none.keytab", "HTTP/localhost@EXAMPLE.COM")
