"""The operator console in a real headless browser: Debian's ``chromium`` driven by Selenium
through the system's ``chromedriver`` (nothing is downloaded; a missing browser fails the test
and says that ``make sysdeps`` installs it).

The service runs on loopback as in the other serve tests — real Hypercorn, a worker beside it,
a scripted model whose ``delete`` call needs approval, so the run suspends. The model puts a
secret into the call's arguments: the worker redacts it from everything recorded, so the
console shows ``[REDACTED]`` and the page never holds the secret. A person types the operator
token in, sees the pending approval, types a reason and clicks Approve; the timeline then shows
the decision, the tool call's outcome and the run's completion. The same page is checked at a
phone's width (375 px): calls that start waiting while it is open appear by themselves (and a
reason being typed survives the refresh), nothing overflows sideways, and a call is decided
there. A followed timeline shows a model's text as it is streamed, on a line the run's end
replaces.

Screenshots (``approvals.png``, ``timeline.png``, ``phone.png``, ``streaming.png``, and
``failed-<test>.png`` when a test fails) are written to the directory
``$EFFECTAGENT_TEST_ARTIFACTS`` if that is set, else ``<repo>/.test-artifacts/serve/`` (ignored
by git), and to each test's ``tmp_path``.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import httpx2
import pytest
import trio
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

from effectagent.ai import ModelRequest, TextDeltaPart, TextStartPart, UserMessage
from effectagent.testing import Turn

from .support import ANN, OPS, Served, SseReader, auth, settings, settled_sync

ROOT = Path(__file__).absolute().parents[3]
#: A secret the model puts into a tool call's arguments: it must never reach the page.
SECRET = "browser-secret-canary-9d4b2f7a1c6e3085"
#: Generous bounds on conditions (the machine may be busy); nothing waits for a fixed time.
BOUND = 60.0
DESKTOP = (1280, 900)
PHONE = (375, 812)
#: What the model streams for ``stream``, before it hangs (the run is aborted).
STREAMED = "Streaming <b>as</b> it comes"


def _text(message: Any) -> str:
    return "".join(getattr(part, "text", "") for part in message.content)


def respond(request: ModelRequest) -> Turn | str:
    """``delete NAME`` asks to delete ``NAME-<SECRET>.tar`` (approval needed); after the
    tool's result, ``done``. ``stream`` streams :data:`STREAMED` and hangs."""
    last = request.messages[-1]
    if isinstance(last, UserMessage) and _text(last) == "stream":
        pieces = [STREAMED[i : i + 4] for i in range(0, len(STREAMED), 4)]
        return Turn.hanging(after=(TextStartPart("t0"), *(TextDeltaPart("t0", p) for p in pieces)))
    if isinstance(last, UserMessage):
        name = _text(last).removeprefix("delete ")
        return Turn.tool_calls(("delete_file", {"name": f"{name}-{SECRET}.tar"}))
    return "done"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # The shared service, its worker redacting SECRET and running respond.
    found = Served(
        tmp_path_factory.mktemp("browser") / "serve.db",
        settings(),
        model=respond,
        secrets=(SECRET,),
    )
    try:
        yield found
    finally:
        found.close()


def _parents() -> dict[int, int]:
    """Each process's parent, read from /proc."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:  # it ended while we looked
            continue
        found[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def _tree(root: int) -> dict[int, int]:
    """Pidfds of ``root`` and all its descendants, by pid (a pid is kept only if, once its
    pidfd is open, it is still the child it was: the fd then names that very process)."""
    parents = _parents()
    pids, edge = [root], [root]
    while edge:
        edge = [pid for pid, parent in parents.items() if parent in edge]
        pids.extend(edge)
    fds = {}
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        if pid == root or _parents().get(pid) == parents[pid]:
            fds[pid] = fd
        else:
            os.close(fd)
    return fds


def _ended(pidfd: int) -> bool:
    """Whether the process of ``pidfd`` ended within :data:`BOUND` seconds."""
    readable, _, _ = select.select([pidfd], [], [], BOUND)
    return bool(readable)


def _commands() -> tuple[str, str]:
    """The system's ``chromium`` and ``chromedriver``; their absence fails the test (never a
    skip: the console would go untested) with a sentence saying what installs them."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        missing = " and ".join(
            name for name, found in (("chromium", chromium), ("chromedriver", driver)) if not found
        )
        pytest.fail(
            f"The browser test needs Debian's chromium and chromium-driver, and {missing} "
            "cannot be found on PATH: `make sysdeps` installs them."
        )
    return chromium, driver


@pytest.fixture(scope="module")
def browser(
    service: Served, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[webdriver.Chrome]:
    """One headless chromium for the module; quit at the end, and every process of it (the
    driver, the browser and the browser's own children) checked gone. It needs ``service`` so
    that it is quit first: a page following an event stream would hold the service's drain."""
    chromium, driver = _commands()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tmp_path_factory.mktemp("chromium-profile")
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
    ):
        options.add_argument(argument)
    chromedriver = Service(executable_path=driver)
    chrome = webdriver.Chrome(service=chromedriver, options=options)
    fds: dict[int, int] = {}
    try:
        yield chrome
    finally:
        try:
            assert chromedriver.process is not None
            fds = _tree(chromedriver.process.pid)
        finally:
            chrome.quit()
        try:
            assert len(fds) >= 2, "chromedriver had started no browser"
            still = sorted(pid for pid, fd in fds.items() if not _ended(fd))
            assert still == [], f"the browser's processes {still} outlived quit()"
        finally:
            for fd in fds.values():
                os.close(fd)


def _artifacts() -> Path:
    given = os.environ.get("EFFECTAGENT_TEST_ARTIFACTS")
    return Path(given) if given else ROOT / ".test-artifacts" / "serve"


def _screenshot(browser: webdriver.Chrome, name: str, tmp_path: Path) -> Path:
    shared = _artifacts()
    shared.mkdir(parents=True, exist_ok=True)
    path = shared / name
    assert browser.save_screenshot(str(path)), f"no screenshot {name}"
    shutil.copyfile(path, tmp_path / name)
    return path


@contextmanager
def _evidence(browser: webdriver.Chrome, name: str, tmp_path: Path) -> Iterator[None]:
    """A screenshot of the page when the block fails (then the failure as it was)."""
    try:
        yield
    except BaseException:
        _screenshot(browser, f"failed-{name}.png", tmp_path)
        raise


def _wait(browser: webdriver.Chrome) -> WebDriverWait[webdriver.Chrome]:
    return WebDriverWait(browser, BOUND, poll_frequency=0.05)


def _submit(service: Served, conversation: str, text: str) -> str:
    with httpx2.Client(base_url=service.url, timeout=BOUND) as client:
        answer = client.post(
            f"/v1/conversations/{conversation}/submissions",
            json={"text": text},
            headers={**auth(ANN), "Idempotency-Key": conversation},
        )
    assert answer.status_code == 202, answer.text
    submission: str = answer.json()["submission_id"]
    return submission


def _sign_in(browser: webdriver.Chrome, service: Served) -> None:
    """Open the console and type the operator's token in, as a person would."""
    browser.get(service.url + "/console")
    field = browser.find_element(By.ID, "token")
    field.click()
    field.send_keys(OPS)
    browser.find_element(By.CSS_SELECTOR, "#login button[type=submit]").click()
    _wait(browser).until(
        lambda b: "Signed in as ops (operator)" in b.find_element(By.ID, "who").text
    )
    assert field.get_attribute("value") == ""  # the field does not keep the token


def _card(browser: webdriver.Chrome, conversation: str) -> WebElement:
    """The pending approval of ``conversation`` in the approvals list, once it appears."""
    path = f"//ul[@id='approvals-list']/li[contains(., '{conversation}')]"

    def found(b: webdriver.Chrome) -> WebElement | Literal[False]:
        cards = b.find_elements(By.XPATH, path)
        return cards[0] if cards else False

    card: WebElement = _wait(browser).until(found)
    return card


def _timeline(browser: webdriver.Chrome) -> list[tuple[str, str]]:
    """The timeline's items as (who, the whole item's text), read at one moment (a streaming
    line may be replaced at any time: elements found one by one could go stale)."""
    items = browser.execute_script(
        "return Array.from(document.querySelectorAll('#timeline-list > li'), "
        "(li) => [li.querySelector('.who').innerText, li.innerText]);"
    )
    return [(str(who), str(text)) for who, text in items]


async def _recorded(url: str, conversation: str) -> list[dict[str, Any]]:
    """The conversation's events as the API serves them, through the run's completion."""
    reader = await SseReader.open(url, f"/v1/conversations/{conversation}/events", OPS)
    events: list[dict[str, Any]] = []
    try:
        with trio.fail_after(BOUND):
            while not events or events[-1]["event"] != "RunCompletedRecord":
                events.append(await reader.event())
    finally:
        await reader.aclose()
    return events


def test_an_operator_approves_a_pending_call_and_follows_the_run_to_its_end(
    service: Served, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    conversation = "conv-" + secrets.token_hex(6)
    reason = "checked with the owner " + secrets.token_hex(3)
    browser.set_window_size(*DESKTOP)
    submission = _submit(service, conversation, "delete backup")
    with _evidence(browser, "approval", tmp_path):
        _sign_in(browser, service)
        card = _card(browser, conversation)
        heading = card.find_element(By.CSS_SELECTOR, "div").text
        assert heading == "delete_file — Delete a file."  # the tool's name said once
        preview = card.find_element(By.TAG_NAME, "pre").text
        assert "backup-[REDACTED].tar" in preview  # the arguments, redacted as recorded
        assert SECRET not in browser.page_source
        _screenshot(browser, "approvals.png", tmp_path)

        field = card.find_element(By.CSS_SELECTOR, "input[aria-label=reason]")
        field.click()
        field.send_keys(reason)
        card.find_element(By.CSS_SELECTOR, "button.approve").click()

        # Deciding opens the conversation's timeline, which follows the run as it goes on.
        _wait(browser).until(
            lambda b: (
                b.find_element(By.ID, "timeline").is_displayed()
                and any(who == "completed" for who, _ in _timeline(b))
            )
        )
        items = _timeline(browser)
        whos = [who for who, _ in items]
        (asked,) = [text for who, text in items if who == "approval asked"]
        assert asked.startswith("approval asked delete_file: Delete a file.\n")
        assert '"name": "backup-[REDACTED].tar"' in asked
        # the call's arguments (recorded as the JSON text the model sent) shown as JSON
        (call,) = [text for who, text in items if who == "calls delete_file"]
        assert call.startswith("calls delete_file {")
        assert '"name": "backup-[REDACTED].tar"' in call
        assert ("approved", f"approved by ops: {reason}") in items
        (outcome,) = [text for who, text in items if who == "delete_file"]
        assert outcome.startswith("delete_file succeeded:")
        assert "deleted backup-[REDACTED].tar" in outcome
        assert whos.index("approved") < whos.index("delete_file") < whos.index("completed")
        assert browser.find_element(By.ID, "conversation").get_attribute("value") == conversation
        assert browser.find_element(By.ID, "error").text == ""
        assert SECRET not in browser.page_source
        _screenshot(browser, "timeline.png", tmp_path)
        assert not browser.find_elements(
            By.XPATH, f"//ul[@id='approvals-list']/li[contains(., '{conversation}')]"
        )

    # The service's side: completed, and exactly one decision — the operator's, with the reason.
    with httpx2.Client(base_url=service.url, timeout=BOUND) as client:
        row = settled_sync(client, submission, ANN)  # settled just after the run's record
    assert row["submission"]["status"] == "completed"
    assert row["answer"] == "done"
    events = trio.run(_recorded, service.url, conversation)
    decisions = [
        e["data"]["record"]["decision"] for e in events if e["event"] == "ToolApprovalDecided"
    ]
    assert len(decisions) == 1
    (decision,) = decisions
    assert decision["approved"] is True
    assert decision["decided_by"] == "ops"
    assert decision["reason"] == reason


def test_on_a_phone_approvals_appear_by_themselves_fit_the_screen_and_can_be_decided(
    service: Served, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    first, second = ("conv-" + secrets.token_hex(6) for _ in range(2))
    reason = "not from a phone"
    browser.set_window_size(*PHONE)
    try:
        with _evidence(browser, "phone", tmp_path):
            _sign_in(browser, service)
            # Calls that start waiting once the page is open appear without a click on Refresh.
            _submit(service, first, "delete photos")
            card = _card(browser, first)
            field = card.find_element(By.CSS_SELECTOR, "input[aria-label=reason]")
            field.click()
            field.send_keys(reason)
            _submit(service, second, "delete videos")
            _card(browser, second)
            # the list was refreshed under the operator's fingers: the typed reason is still there
            assert field.get_attribute("value") == reason
            assert _card(browser, first) == card

            assert browser.execute_script("return window.innerWidth") == PHONE[0]
            scroll = browser.execute_script("return document.documentElement.scrollWidth")
            assert scroll <= PHONE[0], f"the page is {scroll} px wide on a {PHONE[0]} px screen"
            for button in card.find_elements(By.TAG_NAME, "button"):
                box = button.rect
                assert box["x"] >= 0, button.text
                assert box["x"] + box["width"] <= PHONE[0], button.text
            _screenshot(browser, "phone.png", tmp_path)

            card.find_element(By.CSS_SELECTOR, "button.deny").click()
            _wait(browser).until(
                lambda b: any(who == "denied" and reason in text for who, text in _timeline(b))
            )
            assert browser.execute_script("return document.documentElement.scrollWidth") <= PHONE[0]
            assert browser.find_element(By.ID, "error").text == ""
    finally:
        browser.set_window_size(*DESKTOP)


def test_without_the_browser_the_test_fails_saying_what_installs_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no command is found
    with pytest.raises(
        pytest.fail.Exception, match=r"chromium and chromedriver cannot be found"
    ) as failed:
        _commands()
    assert "`make sysdeps` installs them" in str(failed.value)


def test_the_timeline_shows_the_text_as_it_is_streamed_until_the_run_ends(
    service: Served, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    conversation = "live-" + secrets.token_hex(6)
    browser.set_window_size(*DESKTOP)
    with _evidence(browser, "streaming", tmp_path):
        _sign_in(browser, service)
        browser.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=timeline]").click()
        field = browser.find_element(By.ID, "conversation")
        field.clear()
        field.send_keys(conversation)
        browser.find_element(By.CSS_SELECTOR, "#follow button[type=submit]").click()
        _wait(browser).until(
            lambda b: (
                f"Following {conversation} live." in b.find_element(By.ID, "timeline-state").text
            )
        )
        submission = _submit(service, conversation, "stream")  # streams, then hangs
        _wait(browser).until(lambda b: ("streaming…", f"streaming… {STREAMED}") in _timeline(b))
        assert browser.find_elements(By.TAG_NAME, "b") == []  # the text stayed text
        _screenshot(browser, "streaming.png", tmp_path)
        with httpx2.Client(base_url=service.url, timeout=BOUND) as client:
            aborted = client.post(
                f"/v1/submissions/{submission}/abort", json={"reason": "enough"}, headers=auth(ANN)
            )
        assert aborted.status_code == 200, aborted.text
        # The run's end replaces the line of the text its response never recorded.
        _wait(browser).until(
            lambda b: (
                any(who == "failed" for who, _ in _timeline(b))
                and all(who != "streaming…" for who, _ in _timeline(b))
            )
        )
        assert browser.find_element(By.ID, "error").text == ""
