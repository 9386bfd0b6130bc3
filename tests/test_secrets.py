"""Keys never go out or in: the pattern catches short test keys, and the exact values of the
environment's key variables are refused by the ledger and masked in results, errors and logs, even
when a provider echoes them."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from paratune.ledger.keyguard import MASK, mask_logs, mask_secrets, refuse_keys
from paratune.oracle.errors import InputError

from .test_server_common import in_process, portal_client

KEY = "zq7Xw2mK"  # an unusual key no pattern knows


def test_short_test_keys_and_configured_values_are_refused(monkeypatch):
    with pytest.raises(InputError):
        refuse_keys("notes.text", "my key is sk-test-SECRET")
    monkeypatch.setenv("ACME_API_KEY", KEY)
    with pytest.raises(InputError) as err:
        refuse_keys("notes.text", f"token {KEY} here")
    assert KEY not in str(err.value)
    assert mask_secrets(f"a {KEY} b sk-test-SECRET c") == f"a {MASK} b {MASK} c"
    assert refuse_keys("notes.text", "tp=2 pp=4 skip-layers") == "tp=2 pp=4 skip-layers"


def test_logs_carry_masked_messages(monkeypatch, caplog):
    monkeypatch.setenv("ACME_API_KEY", KEY)
    old = logging.getLogRecordFactory()
    try:
        mask_logs(limit=100)
        with caplog.at_level(logging.WARNING):
            logging.getLogger("paratune.test").warning("provider said %s and %s", KEY, "x" * 500)
    finally:
        logging.setLogRecordFactory(old)
    [record] = [r for r in caplog.records if r.name == "paratune.test"]
    assert KEY not in record.getMessage() and MASK in record.getMessage() and len(record.getMessage()) < 200


def test_a_provider_echoing_the_key_gets_it_masked_in_the_answer_and_the_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_MODEL", "openai/gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    fake = types.ModuleType("litellm")

    def completion(model, messages, max_tokens, timeout, num_retries):
        if messages[-1]["content"] == "fail":
            raise RuntimeError(f"401: key {KEY} is wrong")
        message = types.SimpleNamespace(content=f"your key is {KEY}")
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)],
                                     usage=types.SimpleNamespace(prompt_tokens=1, completion_tokens=1))

    fake.completion = completion
    fake.validate_environment = lambda model: {"missing_keys": []}
    fake.completion_cost = lambda completion_response: None
    monkeypatch.setitem(sys.modules, "litellm", fake)
    with in_process(tmp_path) as (server, session), portal_client(server) as (portal, client):
        answer = portal.call(client.call_tool, "query_llm", {"prompt": "hi"})
        assert not answer.is_error and KEY not in answer.content[0].text and MASK in answer.content[0].text
        failed = portal.call(client.call_tool, "query_llm", {"prompt": "fail"})
        assert failed.is_error and KEY not in failed.content[0].text
        note = portal.call(client.call_tool, "note_to_scratchpad", {"text": f"remember {KEY}"})
        assert note.is_error and KEY not in note.content[0].text
        assert session.ledger.notes(session.active.run.id) == []
