"""The research workflows in Chromium, end to end on the shipped runs: mechanisms side by side
(digits, text, colour images), the attention as text (a text run), the data table (a row opens
in the Inspector). Screenshots go to test-artifacts/."""

import pytest

from damcha.views.token_view import TOKEN_VIEW_TITLE
from tests.support.browser import ARTIFACTS, settled, wait_for_figures

pytestmark = pytest.mark.usefixtures("server")


@pytest.mark.parametrize("run", ["digits-damcha", "text-damcha", "images-damcha"])
def test_compare_mechanisms_draws_every_run_of_the_data_set(server, page, run):  # noqa: F811
    from damcha.runs.checkpoints import list_runs
    from tests.support.browser import ROOT

    runs = list_runs(ROOT / "checkpoints")[0]
    dataset = next(r.dataset for r in runs if r.name == run)
    siblings = [r.name for r in runs if r.dataset == dataset]
    page.goto(f"{server}/compare?run={run}&source=Validation+sample")
    assert wait_for_figures(page, 2, timeout_s=180) >= 2  # side by side, and one panel on its own
    assert page.locator(".stException").count() == 0
    titles = page.eval_on_selector_all(".js-plotly-plot .annotation-text", "els => els.map(e => e.textContent)")
    for name in siblings:  # a row of panels per run, named by its run
        assert any(t.startswith(f"{name} @") for t in titles), (name, titles[:6])
    page.locator("[data-testid='stDataFrame']").first.wait_for(timeout=60_000)  # drawn after the panels
    assert page.locator("[data-testid='stDataFrame']").count() == 1  # the losses
    settled(page)
    scroll = page.eval_on_selector("[data-testid='stDataFrame'] .dvn-scroller", "d => [d.scrollWidth, d.clientWidth]")
    assert scroll[0] <= scroll[1], ("the loss table is cut at the right", scroll)
    page.screenshot(path=str(ARTIFACTS / f"compare-{dataset}.png"), full_page=True)


def test_the_attention_as_text_answers_the_pointer(server, page):  # noqa: F811
    page.goto(f"{server}/inspector?run=text-damcha&source=Validation+sample")
    assert wait_for_figures(page, 1) >= 1
    page.get_by_role("tab", name="Attention as text").click()
    page.wait_for_url("**tab=Attention+as+text*", timeout=30_000)  # the open tab is part of the link
    view = page.frame_locator(f"iframe[title='{TOKEN_VIEW_TITLE}']").first
    view.locator(".tok").nth(30).hover()
    assert "(position 30) attends to" in view.locator("#info").inner_text(timeout=30_000)
    stripes = [float(b.get_attribute("data-w")) for b in view.locator(".tok").nth(29).locator(".bars i").all()]
    assert len(stripes) == 4 and all(0 <= w <= 1 for w in stripes) and any(w > 0 for w in stripes)
    assert page.locator(".stException").count() == 0
    page.screenshot(path=str(ARTIFACTS / "inspector-attention-as-text.png"), full_page=True)


def test_a_selected_row_of_the_data_table_opens_in_the_inspector(server, page):  # noqa: F811
    page.goto(f"{server}/table?run=digits-cls-damcha")
    grid = page.locator("[data-testid='stDataFrame']").first
    grid.wait_for(timeout=180_000)
    settled(page)
    box = grid.bounding_box()
    page.mouse.click(box["x"] + 18, box["y"] + 35 + 35 * 3 + 17)  # row 4's selection box (rows are 35 px)
    link = page.get_by_text("Open validation input 3 in the Inspector")
    link.wait_for(timeout=30_000)
    page.screenshot(path=str(ARTIFACTS / "data-table.png"), full_page=True)
    link.click()
    page.get_by_text("validation sample 3 (digit").first.wait_for(timeout=60_000)
    assert page.get_by_role("heading", name="Inspector").count() == 1
    assert page.locator(".stException").count() == 0


TYPED = "Heads compare a query with every key; DAMCHA lets the input choose the comparison."


def test_typed_text_survives_every_page_of_the_sidebar_in_both_directions(server, page):
    from app.navigation import PAGES

    page.goto(f"{server}/inspector?run=text-damcha")
    box = page.locator("textarea").first
    box.wait_for(timeout=60_000)
    box.fill(TYPED)
    box.press("Control+Enter")  # Streamlit's way to submit a text area
    settled(page)
    walk = [p.title for p in PAGES if p.title not in ("Home", "Evidence")]  # the pages that take an input
    for title in walk + walk[::-1]:
        page.locator("[data-testid=stSidebarNav]").get_by_text(title, exact=True).click()
        settled(page)
        texts = page.locator("textarea")
        if texts.count():  # a page with the input picker shows the typed text, and no empty-text error
            texts.first.wait_for(timeout=60_000)
            assert texts.first.input_value() == TYPED, title
        assert page.get_by_text("the text is empty").count() == 0, title
        assert page.locator(".stException").count() == 0, title


def test_an_image_run_walks_every_page_of_the_sidebar_without_an_error_keeping_its_validation_index(server, page):
    """Every page, Home and Evidence included, in both directions: no error, and the validation index chosen
    on the Inspector is the one every page with an input picker shows (a visit to Home lost it)."""
    from app.navigation import PAGES

    page.goto(f"{server}/inspector?run=digits-damcha&source=Validation+sample&sample=5")
    page.get_by_label("Validation index (0..", exact=False).first.wait_for(timeout=60_000)
    settled(page)
    titles = [p.title for p in PAGES]
    for title in titles + titles[::-1]:
        page.locator("[data-testid=stSidebarNav]").get_by_text(title, exact=True).click()
        settled(page)
        assert page.locator(".stException").count() == 0, title
        assert page.locator("[data-testid=stAlertContentError]").count() == 0, title
        index = page.get_by_label("Validation index (0..", exact=False)
        if index.count():
            assert index.first.input_value() == "5", title


def test_the_evidence_page_shows_the_shipped_rehearsal_beside_the_paper(server, page):
    """checkpoints/evidence-tiny (the tiny rehearsal on generated files) beside the demo's results: named as a
    rehearsal on files that are not the published data sets, with the paper's numbers beside its test split."""
    from urllib.parse import quote

    page.goto(f"{server}/evidence?claim={quote('Table 5: text, bits per character')}")
    page.get_by_text("Beside the paper:").first.wait_for(timeout=120_000)
    settled(page)
    assert page.get_by_text("a rehearsal of the code path: not evidence").count() >= 1
    assert page.get_by_text("on files that are not the published data sets").count() >= 1
    assert page.locator(".stException").count() == 0
    page.screenshot(path=str(ARTIFACTS / "evidence-rehearsal.png"), full_page=True)
