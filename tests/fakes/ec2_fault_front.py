"""An HTTP front for moto's server that answers the way AWS does where moto cannot.

Every request goes on to moto unchanged, except:

* queued faults: a call matching (API action, optionally availability zone) is answered
  with AWS's own error payload instead — EC2's
  ``<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/></Response>``,
  the ``<ErrorResponse>`` of other query APIs (STS), or the JSON ``__type`` body of JSON
  APIs (Service Quotas) — with the HTTP status AWS uses for that code. A fault may also be
  answered *after* the call reached moto: the call took effect, its answer was lost.
* RunInstances' ClientToken: EC2 answers a repeated token with the first call's answer (or
  ``IdempotentParameterMismatch`` when the parameters differ); moto ignores the token.
* GetServiceQuota for quotas set with :meth:`EC2FaultFront.set_quota` (moto knows no EC2
  quotas), answered with Service Quotas' JSON payload.
* DescribeInstances can show instances as still ``stopping``/``pending`` for a number of
  polls (moto stops and starts instantly), or show none at all for a number of polls
  (EC2's eventual consistency right after a launch).
* Any call can be made slow (:meth:`EC2FaultFront.slow`): answered after a delay, as a
  throttled or overloaded endpoint answers, instead of moto's milliseconds.

The zone of a call is its ``Placement.AvailabilityZone``, or the zone of its subnet.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit
from xml.sax.saxutils import escape

import boto3

# The HTTP status AWS answers each code with (400 for any code not listed).
_STATUS = {
    "InsufficientInstanceCapacity": 500,
    "InsufficientCapacity": 500,
    "InsufficientHostCapacity": 500,
    "InternalError": 500,
    "InternalFailure": 500,
    "Unavailable": 503,
    "ServiceUnavailable": 503,
    "RequestLimitExceeded": 503,
    "AuthFailure": 401,
    "UnauthorizedOperation": 403,
    "InvalidClientTokenId": 403,
    "SignatureDoesNotMatch": 403,
}
_MESSAGES = {
    "InsufficientInstanceCapacity": (
        "We currently do not have sufficient {instance_type} capacity in the Availability "
        "Zone you requested ({zone}). Our system will be working on provisioning additional "
        "capacity. You can currently get {instance_type} capacity by not specifying an "
        "Availability Zone in your request or choosing another Availability Zone."),
    "VcpuLimitExceeded": (
        "You have requested more vCPU capacity than your current vCPU limit of 0 allows for "
        "the instance bucket that the specified instance type belongs to. Please visit "
        "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit."),
    "AuthFailure": "AWS was not able to validate the provided access credentials",
    "UnauthorizedOperation": "You are not authorized to perform this operation.",
    "InvalidClientTokenId": "The security token included in the request is invalid.",
    "RequestLimitExceeded": "Request limit exceeded.",
    "InternalError": "An internal error has occurred",
    "Unavailable": "The service is unavailable. Please try again shortly.",
}
_STATE_CODES = {"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48,
                "stopping": 64, "stopped": 80}
# A held state is shown in place of the state moto has already reached.
_HELD_OVER = {"stopping": "stopped", "pending": "running", "shutting-down": "terminated"}
_QUOTA_NAMES = {
    "L-1216C47A": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "L-34B43A08": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
}
_QUOTA_CLASSES = {"L-1216C47A": "Standard/OnDemand", "L-34B43A08": "Standard/Spot"}
_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/\d+/([^/]+)/([^/]+)/aws4_request")


@dataclass
class Fault:
    action: str
    code: str
    message: str | None
    status: int
    zone: str | None
    times: int | None  # None: every matching call
    after_forward: bool
    skip: int  # matching calls to let through first


@dataclass(frozen=True)
class Call:
    """One request the front saw, and who answered it."""

    action: str
    zone: str | None
    client_token: str | None
    outcome: str  # "moto", "replayed", "quota", or the fault's code
    params: dict[str, str] = field(default_factory=dict)  # its query parameters, as sent


@dataclass
class _Delay:
    action: str
    seconds: float
    times: int | None  # None: every matching call


@dataclass
class _Hold:
    state: str
    polls: int


@dataclass
class _Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    region: str
    service: str
    action: str
    params: dict[str, str]  # the form parameters of a query-protocol call

    @property
    def is_json(self) -> bool:
        return "X-Amz-Target" in self.headers


class EC2FaultFront:
    """A loopback HTTP server in front of moto; see the module docstring."""

    def __init__(self, upstream_url: str):
        self.upstream = urlsplit(upstream_url)
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._quotas: dict[tuple[str, str], float] = {}
        self._holds: list[_Hold] = []
        self._delays: list[_Delay] = []
        self._delayed: list[str] = []  # the actions of the calls made slow so far
        self._hidden_polls = 0
        self._tokens: dict[tuple[str, str], tuple[bytes, _Answer]] = {}
        self._subnet_zones: dict[str, str] = {}
        self._calls: list[Call] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> EC2FaultFront:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        """Forget faults, quotas, holds and the call log (not ClientTokens: EC2 keeps them)."""
        with self._lock:
            self._faults.clear()
            self._quotas.clear()
            self._holds.clear()
            self._delays.clear()
            self._delayed.clear()
            self._hidden_polls = 0
            self._calls.clear()

    # -- what tests arrange -------------------------------------------------------------
    def fail(self, action: str, code: str, *, message: str | None = None,
             status: int | None = None, zone: str | None = None, times: int | None = None,
             after_forward: bool = False, skip: int = 0) -> None:
        """Answer ``action`` calls [in ``zone``] with ``code``: ``times`` of them (None: all)
        after letting ``skip`` through; ``after_forward``: only once moto has done them."""
        with self._lock:
            self._faults.append(Fault(action, code, message, status or _STATUS.get(code, 400),
                                      zone, times, after_forward, skip))

    def set_quota(self, quota_code: str, value: float, *, service_code: str = "ec2") -> None:
        with self._lock:
            self._quotas[(service_code, quota_code)] = value

    def hold_state(self, state: str, polls: int) -> None:
        """Show instances that reached the state after ``state`` as ``state``, ``polls`` times."""
        if state not in _HELD_OVER:
            raise ValueError(f"can hold {sorted(_HELD_OVER)}, not {state!r}")
        with self._lock:
            self._holds.append(_Hold(state, polls))

    def slow(self, action: str, seconds: float, times: int | None = None) -> None:
        """Answer ``action`` calls only after ``seconds``: ``times`` of them (None: all)."""
        with self._lock:
            self._delays.append(_Delay(action, seconds, times))

    def _take_delay(self, action: str) -> float:
        with self._lock:
            for delay in self._delays:
                if delay.action == action:
                    if delay.times is not None:
                        delay.times -= 1
                        if delay.times == 0:
                            self._delays.remove(delay)
                    self._delayed.append(action)
                    return delay.seconds
        return 0.0

    def delayed(self, action: str) -> int:
        """How many ``action`` calls were made slow so far (each is in flight or done)."""
        with self._lock:
            return self._delayed.count(action)

    def hide_instances(self, polls: int) -> None:
        """Answer the next ``polls`` DescribeInstances calls with no instances."""
        with self._lock:
            self._hidden_polls = polls

    def calls(self, action: str | None = None) -> list[Call]:
        with self._lock:
            return [c for c in self._calls if action is None or c.action == action]

    # -- answering ----------------------------------------------------------------------
    def answer(self, request: _Request) -> _Answer:
        delay = self._take_delay(request.action)
        if delay:
            time.sleep(delay)
        zone = self._zone_of(request)
        token = request.params.get("ClientToken") if request.action == "RunInstances" else None
        fault = self._take_fault(request.action, zone)
        if fault is not None and not fault.after_forward:
            return self._log(request, zone, token, fault.code, self._fault_answer(request, fault,
                                                                                   zone))
        answer, outcome = self._answer_for_real(request, token)
        if fault is not None:
            answer, outcome = self._fault_answer(request, fault, zone), fault.code
        return self._log(request, zone, token, outcome, answer)

    def _answer_for_real(self, request: _Request, token: str | None) -> tuple[_Answer, str]:
        if request.is_json and request.action == "GetServiceQuota":
            quota = self._quota_answer(request)
            if quota is not None:
                return quota, "quota"
        if token:
            return self._idempotent_run(request, token)
        if request.action == "DescribeInstances":
            return self._describe_instances(request), "moto"
        return self._forward(request), "moto"

    def _log(self, request: _Request, zone: str | None, token: str | None, outcome: str,
             answer: _Answer) -> _Answer:
        with self._lock:
            self._calls.append(Call(request.action, zone, token, outcome, request.params))
        return answer

    def _take_fault(self, action: str, zone: str | None) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.action == action and fault.zone in (None, zone):
                    if fault.skip > 0:
                        fault.skip -= 1
                        return None
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times == 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def _fault_answer(self, request: _Request, fault: Fault, zone: str | None) -> _Answer:
        message = fault.message or _MESSAGES.get(fault.code, f"{fault.code}.").format(
            instance_type=request.params.get("InstanceType", "the requested"),
            zone=zone or request.region)
        return _error(request, fault.code, message, fault.status)

    def _forward(self, request: _Request, body: bytes | None = None) -> _Answer:
        connection = http.client.HTTPConnection(self.upstream.hostname or "127.0.0.1",
                                                self.upstream.port, timeout=60)
        try:
            data = request.body if body is None else body
            headers = {k: v for k, v in request.headers.items()
                       if k.lower() not in ("content-length", "connection")}
            headers["Content-Length"] = str(len(data))
            connection.request(request.method, request.path, body=data, headers=headers)
            response = connection.getresponse()
            return _Answer(response.status, response.getheaders(), response.read())
        finally:
            connection.close()

    def _idempotent_run(self, request: _Request, token: str) -> tuple[_Answer, str]:
        key = (request.region, token)
        with self._lock:
            seen = self._tokens.get(key)
        if seen is not None:
            body, answer = seen
            if body != request.body:
                return _error(request, "IdempotentParameterMismatch",
                              "Client token already used before with different parameters.",
                              400), "IdempotentParameterMismatch"
            return answer, "replayed"
        answer = self._forward(request)
        if answer.status == 200:
            with self._lock:
                self._tokens[key] = (request.body, answer)
        return answer, "moto"

    def _quota_answer(self, request: _Request) -> _Answer | None:
        asked = json.loads(request.body or b"{}")
        service_code, quota_code = asked.get("ServiceCode", ""), asked.get("QuotaCode", "")
        with self._lock:
            value = self._quotas.get((service_code, quota_code))
        if value is None:
            return None
        quota = {
            "ServiceCode": service_code,
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{request.region}:123456789012:"
                        f"{service_code}/{quota_code}",
            "QuotaCode": quota_code,
            "QuotaName": _QUOTA_NAMES.get(quota_code, quota_code),
            "Value": float(value),
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
            "UsageMetric": {
                "MetricNamespace": "AWS/Usage",
                "MetricName": "ResourceCount",
                "MetricDimensions": {"Class": _QUOTA_CLASSES.get(quota_code, "Standard/OnDemand"),
                                     "Resource": "vCPU", "Service": "EC2", "Type": "Resource"},
                "MetricStatisticRecommendation": "Maximum",
            },
            "QuotaAppliedAtLevel": "ACCOUNT",
        }
        return _Answer(200, [("Content-Type", "application/x-amz-json-1.1"),
                             ("x-amzn-RequestId", str(uuid.uuid4()))],
                       json.dumps({"Quota": quota}).encode())

    # -- DescribeInstances: holds and hiding --------------------------------------------
    def _describe_instances(self, request: _Request) -> _Answer:
        with self._lock:
            hide = self._hidden_polls > 0
            if hide:
                self._hidden_polls -= 1
            holds = [hold for hold in self._holds if hold.polls > 0]
        wanted = _state_filter(request.params)
        body = None
        if holds and wanted is not None:
            # Ask moto also for the states a held state stands in for.
            body = _widen_state_filter(request.params, {_HELD_OVER[h.state] for h in holds})
        answer = self._forward(request, body)
        if answer.status != 200 or not (hide or holds):
            return answer
        root = ET.fromstring(answer.body)
        namespace = root.tag[1:].split("}")[0] if root.tag.startswith("{") else ""
        held_any = set()
        for reservations in root.iter(f"{{{namespace}}}reservationSet"):
            for reservation in list(reservations):
                instances = reservation.find(f"{{{namespace}}}instancesSet")
                for instance in list(instances if instances is not None else []):
                    state = instance.find(f"{{{namespace}}}instanceState")
                    name = state.find(f"{{{namespace}}}name") if state is not None else None
                    code = state.find(f"{{{namespace}}}code") if state is not None else None
                    if name is None or code is None or instances is None:
                        continue
                    for hold in holds:
                        if name.text == _HELD_OVER[hold.state]:
                            name.text, code.text = hold.state, str(_STATE_CODES[hold.state])
                            held_any.add(id(hold))
                    if hide or (wanted is not None and name.text not in wanted):
                        instances.remove(instance)
                if instances is not None and len(instances) == 0:
                    reservations.remove(reservation)
        with self._lock:
            for hold in holds:
                hold.polls -= id(hold) in held_any
        ET.register_namespace("", namespace)
        body = ET.tostring(root, encoding="utf-8", xml_declaration=True)
        headers = [(k, v) for k, v in answer.headers if k.lower() != "content-length"]
        return _Answer(answer.status, headers, body)

    # -- zones --------------------------------------------------------------------------
    def _zone_of(self, request: _Request) -> str | None:
        zone = request.params.get("Placement.AvailabilityZone")
        subnet = (request.params.get("SubnetId")
                  or request.params.get("NetworkInterface.1.SubnetId"))
        if zone or not subnet:
            return zone
        with self._lock:
            known = self._subnet_zones.get(subnet)
        if known:
            return known
        ec2 = boto3.session.Session().client(  # a session per thread: sessions are not safe
            "ec2", region_name=request.region, endpoint_url=self.upstream.geturl(),
            aws_access_key_id="front", aws_secret_access_key="front")
        subnets = ec2.describe_subnets(SubnetIds=[subnet])["Subnets"]
        found = str(subnets[0]["AvailabilityZone"]) if subnets else None
        if found:
            with self._lock:
                self._subnet_zones[subnet] = found
        return found

    # -- context manager ----------------------------------------------------------------
    def __enter__(self) -> EC2FaultFront:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _state_filter(params: dict[str, str]) -> set[str] | None:
    for name_key, values in _filters(params):
        if params[name_key] == "instance-state-name":
            return {params[v] for v in values}
    return None


def _widen_state_filter(params: dict[str, str], extra: set[str]) -> bytes:
    widened = dict(params)
    for name_key, values in _filters(params):
        if params[name_key] == "instance-state-name":
            prefix = name_key[: -len("Name")]
            present = {params[v] for v in values}
            for n, state in enumerate(sorted(extra - present), start=len(values) + 1):
                widened[f"{prefix}Value.{n}"] = state
    return urlencode(widened).encode()


def _filters(params: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    """(the ``Filter.N.Name`` key, its ``Filter.N.Value.M`` keys) of a query call."""
    for key in params:
        match = re.fullmatch(r"Filter\.(\d+)\.Name", key)
        if match:
            prefix = f"Filter.{match.group(1)}.Value."
            yield key, [k for k in params if k.startswith(prefix)]


def _error(request: _Request, code: str, message: str, status: int) -> _Answer:
    request_id = str(uuid.uuid4())
    if request.is_json:
        return _Answer(status, [("Content-Type", "application/x-amz-json-1.1"),
                                ("x-amzn-RequestId", request_id),
                                ("x-amzn-ErrorType", code)],
                       json.dumps({"__type": code, "Message": message}).encode())
    if request.service == "ec2":
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
                f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error>"
                f"</Errors><RequestID>{request_id}</RequestID></Response>")
    else:
        kind = "Receiver" if status >= 500 else "Sender"
        body = (f'<ErrorResponse xmlns="https://{request.service}.amazonaws.com/doc/2011-06-15/">'
                f"<Error><Type>{kind}</Type><Code>{escape(code)}</Code>"
                f"<Message>{escape(message)}</Message></Error>"
                f"<RequestId>{request_id}</RequestId></ErrorResponse>")
    return _Answer(status, [("Content-Type", "text/xml;charset=UTF-8")], body.encode())


def _parse(handler: BaseHTTPRequestHandler) -> _Request:
    length = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(length) if length else b""
    headers = dict(handler.headers.items())
    scope = _CREDENTIAL_SCOPE.search(headers.get("Authorization", ""))
    region, service = (scope.group(1), scope.group(2)) if scope else ("us-east-1", "")
    params: dict[str, str] = {}
    target = headers.get("X-Amz-Target")
    if target:
        action = target.rpartition(".")[2]
    else:
        query = urlsplit(handler.path).query
        params = dict(parse_qsl(query + "&" + body.decode("utf-8", "replace"),
                                keep_blank_values=True))
        action = params.get("Action", "")
    return _Request(handler.command, handler.path, headers, body, region, service, action,
                    params)


def _handler_for(front: EC2FaultFront) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out apart: no delayed-ACK stall

        def _serve(self) -> None:
            answer = front.answer(_parse(self))
            self.send_response(answer.status)
            for key, value in answer.headers:
                if key.lower() not in ("content-length", "connection", "transfer-encoding",
                                       "server", "date"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer.body)))
            try:
                self.end_headers()
                self.wfile.write(answer.body)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the caller went away (a killed worker)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler
