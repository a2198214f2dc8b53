"""The OpenAPI schema is the truth: schemathesis generates requests from /openapi.json, valid ones and
ones that break it, and runs every check it has on each answer (no 5xx, documented status codes, content
types and headers, answers that match their schema, valid data accepted, invalid data refused), with a
fixed seed and a bounded number of examples, against the app in process (a few seconds per operation).

Driven through hypothesis directly (schemathesis' pytest plugin does not run under this pytest)."""
import pytest

from .serving_helpers import make_tiny_models

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from bertfam.serving import Limits, Service, create_app  # noqa: E402
from bertfam.serving.app import LOOPBACK_HOSTS, Access  # noqa: E402

# small limits keep generated bodies small (fast), and inside what the tiny models read in one window, so
# a text the schema allows is one the model answers (fill-mask: its [MASK] lies inside the window)
LIMITS = Limits(max_texts=3, max_passage_chars=60, max_body_bytes=20_000, timeout_s=30.0)
EXAMPLES = 25  # per operation and generation mode


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    dirs = make_tiny_models(str(tmp_path_factory.mktemp("models")))
    # no fill-mask model: /v1/fill-mask must then be absent from the schema (and the run)
    service = Service.from_dirs([dirs["span"], dirs["classification"], dirs["token"]], LIMITS)
    # schemathesis' in-process client calls itself "testserver" (Host): allowed here, beside the loopback names
    app = create_app(service, Access(allowed_hosts=LOOPBACK_HOSTS + ("testserver",)))
    paths = app.openapi()["paths"]
    assert "/v1/fill-mask" not in paths and {"/v1/mrc", "/v1/classify", "/v1/ner", "/v1/embed"} <= set(paths)
    from schemathesis.config import SchemathesisConfig

    # a list over --max-texts breaks the schema's maxItems and is refused with 413, the status of a limit
    refusals = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]
    config = SchemathesisConfig.from_dict({"checks": {"negative_data_rejection": {"expected-statuses": refusals}}})
    return schemathesis.openapi.from_asgi("/openapi.json", app, config=config)


def _operations(schema):
    return [result.ok() for result in schema.get_all_operations()]


def test_schema_lists_the_served_operations(api_schema):
    assert sorted(op.label for op in _operations(api_schema)) == [
        "GET /health", "POST /v1/classify", "POST /v1/embed", "POST /v1/mrc", "POST /v1/ner"]


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("label", ["GET /health", "POST /v1/classify", "POST /v1/embed", "POST /v1/mrc",
                                   "POST /v1/ner"])
def test_every_answer_matches_the_schema(api_schema, label, mode):
    from schemathesis import GenerationMode

    (op,) = [op for op in _operations(api_schema) if op.label == label]
    if mode == "negative" and op.method.upper() == "GET":
        pytest.skip("GET /health takes no input to break")

    @given(case=op.as_strategy(generation_mode=GenerationMode(mode)))
    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    def run(case):
        case.call_and_validate()
    run()
