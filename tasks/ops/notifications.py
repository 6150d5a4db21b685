"""Notifications: Prefect automations that call a webhook when a Podium flow run fails or crashes, and when a run
reports an INVALID result, a failed audit or a failed gate of those in NOTIFYING_GATES (a gate never fails the run;
this is how a nightly schedule hears of a degraded cluster).

The flows emit custom events for the last three (`emit_result_events`, `emit_audit_failed`, `emit_gate_events`); the
server's own
`prefect.flow-run.Failed` / `Crashed` events cover the first. `register(url)` saves the webhook as a
`CustomWebhookNotificationBlock` and (re)creates the two automations, so running it again replaces rather than
duplicates them. The webhook receives JSON `{"subject": ..., "text": ...}`; Slack, Teams and the other Prefect
notification blocks work the same way (save one and pass its id to `register_automations`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from submission.results.runs import RunRecord

EVENT_INVALID = "podium.result.invalid"
EVENT_AUDIT_FAILED = "podium.audit.failed"
EVENT_GATE_FAILED = "podium.gate.failed"
NOTIFYING_GATES = ("published",)   # the gates whose failure notifies: the run against the published results
BLOCK_NAME = "podium-webhook"
FLOWS = ("podium-submission",)   # the flow names whose failures notify (bring-up runs under this name too)
RUN_FAILED = "podium: flow run failed or crashed"
RESULT_BAD = "podium: INVALID result or failed audit"   # and a failed notifying gate; the name is kept so that
                                                         # `register` replaces the automation servers already have

FAILED_SUBJECT = "Podium: {{ flow.name }} run {{ flow_run.name }} is {{ flow_run.state.name }}"
FAILED_BODY = ("Flow run {{ flow_run.name }} ({{ flow_run.id }}) of {{ flow.name }} entered "
               "{{ flow_run.state.name }}: {{ flow_run.state.message }}")
EVENT_SUBJECT = "Podium: {{ event.payload.what }} in {{ event.resource['prefect.resource.name'] }}"
EVENT_BODY = ("{{ event.payload.what }}: {{ event.resource['prefect.resource.name'] }} "
              "(plan {{ event.payload.plan }}, flow run {{ event.payload.flow_run_id }}): {{ event.payload.reason }}")


def _resource(kind: str, run_id: str, name: str, plan: str) -> dict[str, str]:
    return {"prefect.resource.id": f"podium.{kind}.{run_id}.{name}", "prefect.resource.name": name,
            "podium.plan": plan}


def emit_result_events(records: Iterable[RunRecord], run_id: str, plan: str) -> list[str]:
    """One `podium.result.invalid` event per INVALID performance run; returns the labels it reported."""
    from prefect.events import emit_event

    reported = []
    for r in records:
        if r.mode != "performance" or r.valid is not False:
            continue
        emit_event(EVENT_INVALID, resource=_resource("result", run_id, r.label, plan),
                   payload={"what": "INVALID result", "plan": plan, "flow_run_id": run_id, "run": r.label,
                            "validity": r.validity, "reason": "; ".join(r.invalid_reasons) or "see the summary log"})
        reported.append(r.label)
    return reported


def emit_audit_failed(audit: str, label: str, run_id: str, plan: str, reason: str) -> None:
    """A failed compliance audit (TEST01, TEST04, ...) of one scenario (`label` names the audit's run)."""
    from prefect.events import emit_event

    emit_event(EVENT_AUDIT_FAILED, resource=_resource("audit", run_id, label, plan),
               payload={"what": f"{audit} failed", "plan": plan, "flow_run_id": run_id, "run": label,
                        "reason": reason})


def emit_audit_events(audits: Iterable[Any], run_id: str, plan: str) -> list[str]:
    """One `podium.audit.failed` event per audit record (`submission.results.runs.AuditRecord`) that did not pass."""
    reported = []
    for a in audits:
        if a.passed:
            continue
        emit_audit_failed(a.test, a.label, run_id, plan, a.summary())
        reported.append(a.label)
    return reported


def emit_gate_events(gates: Iterable[dict[str, Any]], run_id: str, plan: str) -> list[str]:
    """One `podium.gate.failed` event per failed gate (`submission.checks.gates.Gate` as a dict) of NOTIFYING_GATES;
    returns the subjects it reported."""
    from prefect.events import emit_event

    reported = []
    for g in gates:
        if g["passed"] is not False or g["gate"] not in NOTIFYING_GATES:
            continue
        emit_event(EVENT_GATE_FAILED, resource=_resource("gate", run_id, f"{g['gate']} {g['subject']}", plan),
                   payload={"what": f"{g['gate']} gate FAIL", "plan": plan, "flow_run_id": run_id,
                            "run": g["subject"], "reason": f"{g['value']:g} (bound {g['bound']}): {g['detail']}"})
        reported.append(g["subject"])
    return reported


def save_webhook(url: str, name: str = BLOCK_NAME) -> UUID:
    """Save (or overwrite) the webhook block; returns its block document id."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock

    block = CustomWebhookNotificationBlock(name=name, url=url, method="POST",
                                           json_data={"subject": "{{subject}}", "text": "{{body}}"})
    return block.save(name, overwrite=True)


def automations(block_id: UUID, flows: Sequence[str] = FLOWS) -> list[Any]:
    """The two automations (not yet created): failed/crashed flow runs, and Podium's custom result events."""
    from prefect.automations import Automation, EventTrigger, Posture, SendNotification

    failed = Automation(
        name=RUN_FAILED, description="A Podium flow run failed or crashed",
        trigger=EventTrigger(expect={"prefect.flow-run.Failed", "prefect.flow-run.Crashed"},
                             match={"prefect.resource.id": "prefect.flow-run.*"},
                             match_related={"prefect.resource.role": "flow", "prefect.resource.name": list(flows)},
                             posture=Posture.Reactive, threshold=1, within=0),
        actions=[SendNotification(block_document_id=block_id, subject=FAILED_SUBJECT, body=FAILED_BODY)])
    bad = Automation(
        name=RESULT_BAD, description="A Podium run reported an INVALID result, a failed audit or a failed gate",
        trigger=EventTrigger(expect={EVENT_INVALID, EVENT_AUDIT_FAILED, EVENT_GATE_FAILED},
                             match={"prefect.resource.id": "podium.*"},
                             posture=Posture.Reactive, threshold=1, within=0),
        actions=[SendNotification(block_document_id=block_id, subject=EVENT_SUBJECT, body=EVENT_BODY)])
    return [failed, bad]


def register_automations(block_id: UUID, flows: Sequence[str] = FLOWS) -> list[UUID]:
    """Create the automations, replacing any of the same names; returns their ids."""
    from prefect.automations import Automation

    ids = []
    for automation in automations(block_id, flows):
        try:
            while True:   # names are not unique on the server: remove every earlier copy
                Automation.read(name=automation.name).delete()
        except ValueError:
            pass
        ids.append(automation.create().id)
    return ids


def register(webhook_url: str, flows: Sequence[str] = FLOWS) -> list[UUID]:
    """The whole set-up against the current Prefect API: the webhook block and both automations."""
    return register_automations(save_webhook(webhook_url), flows)
