"""The web page in a real browser: Debian's headless Chromium driven by Playwright, against a real uvicorn.

Skipped (with the reason shown) where /usr/bin/chromium is absent, except under CI=true, where that is a
failure. BERTFAM_SCREENSHOTS=1 also writes the screenshots to docs/ (the README shows them), and
BERTFAM_SCREENSHOT_MRC_MODEL=DIR serves a trained span model there instead of the random one.
"""
import os
import shutil

import pytest

from .conftest import ROOT
from .serving_helpers import LiveServer, make_tiny_models

CHROMIUM = os.environ.get("BERTFAM_CHROMIUM", "/usr/bin/chromium")  # Debian's, never a downloaded one
IN_CI = os.environ.get("CI", "").lower() == "true"


def _need_browser():
    if not os.path.exists(CHROMIUM):
        msg = f"{CHROMIUM} not found: install Debian's chromium and chromium-driver (.ci/run does)"
        if IN_CI:
            pytest.fail(msg + " -- CI=true, so this is a failure, not a skip")
        pytest.skip(msg)
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("playwright is not installed (the [test] extra has it)")
        pytest.skip("playwright is not installed (pip install playwright; never `playwright install`)")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    from bertfam.serving import Limits, Service, create_app

    dirs = make_tiny_models(str(tmp_path_factory.mktemp("models")))
    # for the README screenshot a trained reading-comprehension model can stand in for the random one
    span = os.environ.get("BERTFAM_SCREENSHOT_MRC_MODEL") or dirs["span"]
    service = Service.from_dirs([span, dirs["classification"], dirs["token"], dirs["mlm"]], Limits())
    with LiveServer(create_app(service)) as srv:
        yield srv


@pytest.fixture(scope="module")
def page(request):
    _need_browser()  # before the server starts: a skip costs nothing
    live = request.getfixturevalue("live")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        pg = browser.new_page(viewport={"width": 1000, "height": 820})
        # the page must be self-contained: any request that leaves the server is recorded
        pg.outside = []
        pg.on("request", lambda r: None if r.url.startswith(live.url) else pg.outside.append(r.url))
        pg.goto(live.url + "/")
        pg.wait_for_function("document.getElementById('status').textContent.includes('(span)')")
        yield pg
        browser.close()


def _save(pg, tmp_path, name):
    path = tmp_path / name
    pg.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000  # a real rendering, not a blank page
    if os.environ.get("BERTFAM_SCREENSHOTS") == "1":
        shutil.copy(path, os.path.join(ROOT, "docs", name))
    return path


def test_mrc_tab_highlights_the_answer_or_says_no_answer(page, live, tmp_path):
    import httpx

    question = "中国的首都是哪里？"
    page.fill("#question", question)
    page.click("#ask")
    page.wait_for_selector("#answer, #no-answer", timeout=20_000)
    # what the page shows must be what the API answers for the same input
    passage = page.input_value("#passage")
    api = httpx.post(live.url + "/v1/mrc", json={"question": question, "passage": passage,
                                                 "title": page.input_value("#title")}).json()
    if api["answerable"]:
        assert page.text_content("#answer") == passage[api["start"]:api["end"]] == api["answer"]
        assert page.text_content("#passage-view") == passage  # the whole passage, answer marked inside
        assert page.locator("mark").count() == 1
    else:
        assert page.text_content("#no-answer") == "无答案"
        assert page.locator("#no-answer").is_visible()
    assert f"{api['score']:.3f}" in page.text_content("#score")
    _save(page, tmp_path, "screenshot-mrc.png")
    assert page.outside == []


def test_mrc_tab_shows_no_answer_and_errors(page, live):
    # an unanswerable rendering, forced through the page's own renderer with an API-shaped result
    page.evaluate("renderMRC(document.getElementById('mrc-result'), '一段文字。',"
                  " {answer: null, start: null, end: null, score: 0.93, answerable: false})")
    assert page.text_content("#no-answer") == "无答案"
    assert "0.930" in page.text_content("#mrc-result")
    assert page.locator("#closest").count() == 0  # no candidates asked: nothing marked
    # with candidates (the page asks for top_k), the declined result shows and marks the best span apart
    page.evaluate("renderMRC(document.getElementById('mrc-result'), '北京是首都。',"
                  " {answer: null, start: null, end: null, score: 0.6, answerable: false,"
                  "  candidates: [{text: '北京', start: 0, end: 2, score: 0.3}]})")
    assert page.text_content("#closest-text") == page.text_content("#closest") == "北京"
    assert page.text_content("#passage-view") == "北京是首都。"
    # a bad request shows the API's one-line error, naming the field
    page.fill("#question", "   ")
    page.click("#ask")
    page.wait_for_selector("#mrc-result .error")
    assert "question" in page.text_content("#mrc-result .error")


def test_other_tab_runs_every_loaded_task(page, live, tmp_path):
    import httpx

    page.click("#tab-other")
    options = page.eval_on_selector_all("#task option", "os => os.map(o => o.value)")
    assert options == ["classify", "ner", "fill-mask"]
    page.select_option("#task", "classify")
    page.fill("#text", "这家餐厅的菜很好吃。")
    page.click("#run")
    page.wait_for_selector("#label")
    assert page.text_content("#label") in ("负面", "正面")
    page.select_option("#task", "ner")
    page.click("#run")
    page.wait_for_selector("#ner-view")
    text = page.input_value("#text")
    api = httpx.post(live.url + "/v1/ner", json={"text": text}).json()
    assert page.locator("#ner-view .ent").count() == len(api["entities"])
    # the text reads unchanged around the entity marks (type tags aside)
    shown = page.evaluate("Array.from(document.getElementById('ner-view').childNodes)"
                          ".map(n => n.nodeType === 3 ? n.textContent : n.firstChild.textContent).join('')")
    assert shown == text
    page.select_option("#task", "fill-mask")
    page.click("#run")
    page.wait_for_selector("#other-result table")
    assert page.locator("#other-result tr").count() == 5  # top 5 candidates for the one [MASK]
    page.select_option("#task", "classify")
    page.fill("#text", "这家餐厅的菜很好吃，服务也很周到。")
    page.click("#run")
    page.wait_for_selector("#label")
    _save(page, tmp_path, "screenshot-tasks.png")
    assert page.outside == []


def test_docs_page_lists_every_endpoint_offline(page, live):
    """/docs renders from /openapi.json alone: every endpoint with its schemas, nothing fetched elsewhere."""
    ctx = page.context.browser.new_context()
    pg = ctx.new_page()
    outside = []
    pg.on("request", lambda r: None if r.url.startswith(live.url) else outside.append(r.url))
    pg.goto(live.url + "/docs")
    pg.wait_for_selector("details.op")
    paths = pg.locator("details.op .path").all_text_contents()
    assert {"/health", "/v1/mrc", "/v1/classify", "/v1/ner", "/v1/embed", "/v1/fill-mask"} <= set(paths)
    mrc = pg.locator("details.op", has_text="/v1/mrc").first
    mrc.locator("summary").click()
    assert '"question"' in mrc.locator("pre").first.text_content()  # the request schema, references inlined
    mrc.locator("textarea").fill('{"question": "中国的首都是哪里？", "passage": "北京是中国的首都。"}')
    mrc.locator("button").click()
    pg.wait_for_function("[...document.querySelectorAll('pre')].some(p => p.textContent.startsWith('200 '))")
    assert pg.text_content("#error") == "" and outside == []
    ctx.close()
