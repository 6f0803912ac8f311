"""``medagentgym view``: one self-contained page of a run's episodes, loaded in a real headless Chromium.

The run is a real oracle evaluation (bubblewrap sandbox) plus hostile episodes whose task id, action code,
observation and verdict carry HTML and ``</script>``: the page must show them as text and never run them. A run of
10,000 episodes must draw only the rows in view. Chromium is Debian's package (``apt-get install -y chromium``);
without it the browser tests skip and say so.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from medagentgym.env_client.viewer import load_episodes, outcome, verdict_kind, write_page

SANDBOX = "bwrap" if shutil.which("bwrap") else "local"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `apt-get install -y chromium` (Debian "
                                                             "package, root) runs the browser tests of the viewer")
#: Set by any hostile payload that manages to run.
PWNED = "data-pwned"
HOSTILE_CODE = '</script><img src=x onerror="document.body.setAttribute(\'data-pwned\',\'code\')"><script>'
HOSTILE_OBS = ("<script>document.body.setAttribute('data-pwned','obs')</script>"
               "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">\u2028</script>")
HOSTILE_ID = 'toy_sql/test/"><svg onload="document.body.setAttribute(\'data-pwned\',\'id\')">'


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A real oracle evaluation of toy_sql (5 episodes) with two hostile wrong episodes appended."""
    base = tmp_path_factory.mktemp("view")
    out = base / "eval"
    proc = subprocess.run([sys.executable, "-m", "medagentgym", "eval", "--policy", "oracle", "--families", "toy_sql",
                           "--limit", "5", "--size", "tiny", "--tasks-root", str(base / "tasks"), "--out", str(out),
                           "--sandbox", SANDBOX, "--allow-unisolated", "--no-progress", "--no-plots"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    store = out / "trajectories.jsonl"
    first = json.loads(store.read_text().splitlines()[0])
    bad = copy.deepcopy(first)
    bad["header"]["task_id"] = HOSTILE_ID
    bad["steps"][0]["action"]["code"] = HOSTILE_CODE
    bad["steps"][0]["raw_text"] = HOSTILE_CODE
    bad["steps"][0]["observation"] = HOSTILE_OBS
    bad["final"]["verdict"] = {"correct": False, "score": 0.0, "reason": "<b>17</b> does not match '2'",
                               "error": None, "infra": False}
    bad["final"]["reward"] = 0.0
    truncated = copy.deepcopy(bad)
    truncated["header"]["sample_idx"] = 1
    truncated["final"].update(truncated=True, reason="max_turns", verdict=None, reward=0.0)
    with open(store, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(bad) + "\n" + json.dumps(truncated) + "\n")
    return out


def test_outcomes_and_verdict_kinds():
    assert outcome(None) == "failed to run"
    assert outcome({"verdict": {"correct": True}}) == "correct"
    assert outcome({"verdict": {"correct": False}, "reason": "submitted"}) == "wrong"
    assert outcome({"verdict": None, "truncated": True, "reason": "max_turns"}) == "truncated"
    assert outcome({"verdict": {"correct": False, "error": "ValueError"}}) == "grader error"
    assert outcome({"verdict": {"correct": False, "infra": True}}) == "failed to run"
    assert outcome({"verdict": None, "reason": "loop"}) == "no submission"
    assert verdict_kind("17 does not match '2'") == "# does not match '…'"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_the_page_is_self_contained_and_hostile_text_stays_data(run_dir):
    page, n = write_page(run_dir)
    assert n == 7 and page == run_dir / "view.html"
    html = page.read_text(encoding="utf-8")
    parser = _Tags()
    parser.feed(html)
    tags = [t for t, _ in parser.tags]
    assert tags.count("script") == 2 and "img" not in tags and "svg" not in tags, "run text became markup"
    assert not any(a.get("src") or (a.get("href") or "").startswith("http") for _, a in parser.tags), \
        "the page loads nothing from elsewhere"
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.DOTALL).group(1)
    assert "<" not in data and ">" not in data and "\u2028" not in data
    decoded = json.loads(data)
    codes = [s["c"] for e in decoded["episodes"] for s in e["st"]]
    assert HOSTILE_CODE in codes, "the JSON decodes back to the exact model text"
    assert {"correct", "wrong", "truncated"} <= set(decoded["outcomes"])
    assert len(decoded["strings"]) < 2 * n, "shared prompts are stored once"


def test_view_command_refuses_a_folder_without_episodes_in_one_line(tmp_path):
    (tmp_path / "other.jsonl").write_text("")
    proc = subprocess.run([sys.executable, "-m", "medagentgym", "view", str(tmp_path)], capture_output=True,
                          text=True, timeout=600, check=False)  # a hang guard: ~1 CPU-s
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"{tmp_path} is not a run: no {tmp_path / 'trajectories.jsonl'} (it holds other.jsonl" in proc.stderr


def _chromium(tmp_path: Path, url: str, *args: str) -> str:
    profile = tmp_path / "chromium-profile"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--window-size=1400,900",
                           *(args or ("--dump-dom",)), url], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _body(dom: str) -> dict:
    """The attributes of the rendered ``<body>`` (the page sets data-ready; a payload that ran sets data-pwned)."""
    found = re.search(r"<body([^>]*)>", dom)
    assert found, dom[-2000:]
    return dict(re.findall(r'([\w-]+)="([^"]*)"', found.group(1)))


@needs_chromium
def test_in_chromium_the_page_loads_filters_opens_an_episode_and_runs_no_model_text(run_dir, tmp_path):
    page, _ = write_page(run_dir, tmp_path / "view.html")
    with open(run_dir / "trajectories.jsonl", encoding="utf-8") as fh:
        data = load_episodes(fh)
    hostile = next(i for i, e in enumerate(data["episodes"]) if e["id"] == HOSTILE_ID and e["o"] == "wrong")
    dom = _chromium(tmp_path, page.as_uri())
    body = _body(dom)
    assert body.get("data-ready") == "1" and PWNED not in body, body
    assert "7 of 7 episodes" in dom and dom.count('class="row ') == 7
    dom = _chromium(tmp_path, f"{page.as_uri()}#family=toy_sql&outcome=wrong&episode={hostile}")
    body = _body(dom)
    assert body.get("data-ready") == "1" and PWNED not in body, "model text ran in the page"
    assert "1 of 7 episodes" in dom and dom.count('class="row ') == 1
    detail = dom.split('id="detail"', 1)[1]
    assert "Grader's verdict" in detail and "&lt;b&gt;17&lt;/b&gt; does not match '2'" in detail
    assert "&lt;/script&gt;&lt;img src=x onerror=" in detail, "the action's code is shown as text"
    assert "&lt;script&gt;document.body.setAttribute" in detail, "the observation is shown as text"
    assert "Prompt (2 message(s))" in detail and "Turn 1 · code_execution" in detail and "Observation" in detail
    assert "<img" not in dom and "<svg" not in dom
    shot = tmp_path / "episode.png"
    _chromium(tmp_path, f"{page.as_uri()}#outcome=wrong&episode={hostile}", f"--screenshot={shot}")
    from matplotlib.image import imread

    pixels = imread(shot)[:, :, :3]  # RGB in [0, 1]
    assert pixels.shape[:2] == (900, 1400)
    assert len({tuple(p) for p in pixels[::7, ::7].reshape(-1, 3).round(2).tolist()}) > 50, "a blank screenshot"
    # the outcome colour of a wrong episode (#a1261c) is drawn: the page rendered its styles, the list and the detail
    wrong = (abs(pixels[..., 0] - 0xA1 / 255) < 0.1) & (abs(pixels[..., 1] - 0x26 / 255) < 0.1) & \
        (abs(pixels[..., 2] - 0x1C / 255) < 0.1)
    assert wrong.any()
    shutil.copy(shot, run_dir / "episode.png")  # kept beside the run for a person to look at


@pytest.mark.slow
@needs_chromium
def test_ten_thousand_episodes_draw_only_the_rows_in_view(run_dir, tmp_path):
    rows = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    big = tmp_path / "big.jsonl"
    with open(big, "w", encoding="utf-8") as fh:
        for i in range(10_000):
            row = copy.deepcopy(rows[i % 5])
            row["header"]["task_id"] = f"toy_sql/test/{i:05d}"
            if i % 3 == 0:
                row["final"]["verdict"] = {"correct": False, "score": 0.0, "reason": f"{i} does not match '2'",
                                           "error": None, "infra": False}
            fh.write(json.dumps(row) + "\n")
    page, n = write_page(big, tmp_path / "big.html")
    assert n == 10_000
    size_mb = page.stat().st_size / 1e6
    assert size_mb < 60, f"{size_mb:.1f} MB"
    dom = _chromium(tmp_path, f"{page.as_uri()}#outcome=wrong&episode=9999")
    body = _body(dom)
    assert body.get("data-ready") == "1", body
    assert "3334 of 10000 episodes" in dom
    drawn = dom.count('class="row ')
    assert 0 < drawn <= 80, f"{drawn} rows drawn for 3334 matches: the list is not virtualised"
    assert "toy_sql/test/09999" in dom.split('id="detail"', 1)[1]
    print(f"10,000 episodes: page {size_mb:.1f} MB, render {body.get('data-render-ms')} ms (headless, this machine)")


class _DevTools:
    """Headless Chromium driven over the DevTools protocol (a real click, a real change event)."""

    def __init__(self, tmp_path: Path) -> None:
        import time

        import httpx
        from websockets.sync.client import connect

        profile = tmp_path / "devtools-profile"
        self.proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                      "--window-size=1400,900", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"
        for _ in range(600):  # polled, not timed: Chromium writes the file once it listens
            if port_file.is_file() and port_file.read_text().strip():
                break
            assert self.proc.poll() is None, "chromium exited"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        page = next(t for t in httpx.get(f"http://127.0.0.1:{port}/json", timeout=30).json() if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == self.next_id:
                assert "error" not in reply, reply
                return reply["result"]

    def js(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def open(self, url: str) -> None:
        import time

        self.call("Page.navigate", url=url)
        for _ in range(600):
            if self.js("document.body && document.body.dataset.ready") == "1":
                return
            time.sleep(0.1)
        raise AssertionError("the page never became ready")

    def click(self, selector: str) -> None:
        box = self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                      f" return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def close(self) -> None:
        self.ws.close()
        self.proc.terminate()
        self.proc.wait(timeout=60)


@needs_chromium
def test_in_chromium_a_user_filters_with_the_selects_and_clicks_an_episode_open(run_dir, tmp_path):
    page, _ = write_page(run_dir, tmp_path / "view.html")
    browser = _DevTools(tmp_path)
    try:
        browser.open(page.as_uri())
        assert browser.js("document.getElementById('count').textContent") == "7 of 7 episodes"
        browser.js("(() => { const s = document.getElementById('outcome'); s.value = 'wrong';"
                   " s.dispatchEvent(new Event('change')); })()")
        assert browser.js("document.getElementById('count').textContent") == "1 of 7 episodes"
        assert "outcome=wrong" in browser.js("location.hash")
        browser.click("#spacer .row")  # a real mouse click on the one row left
        assert browser.js("document.querySelector('#detail h2').textContent") == HOSTILE_ID
        codes = browser.js("[...document.querySelectorAll('#detail pre.code')].map(p => p.textContent)")
        assert HOSTILE_CODE in codes, "the action's code is shown exactly, as text"
        assert browser.js("document.querySelectorAll('img, svg, #detail script').length") == 0
        assert browser.js("document.body.hasAttribute('data-pwned')") is False, "model text ran in the page"
        browser.js("(() => { const s = document.getElementById('outcome'); s.value = '';"
                   " s.dispatchEvent(new Event('change')); })()")
        browser.js("(() => { const q = document.getElementById('q'); q.value = 'toy_sql/test/0003';"
                   " q.dispatchEvent(new Event('input')); })()")
        assert browser.js("document.getElementById('count').textContent") == "1 of 7 episodes"
    finally:
        browser.close()


def test_serve_answers_the_page_on_loopback_and_stops_on_ctrl_c(run_dir, tmp_path):
    import signal
    import socket
    import time

    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "medagentgym", "view", str(run_dir), "--out",
                             str(tmp_path / "v.html"), "--serve", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.1)
        assert page.status_code == 200 and page.text == (tmp_path / "v.html").read_text(encoding="utf-8")
        assert httpx.get(f"http://127.0.0.1:{port}/../trajectories.jsonl", timeout=5).status_code == 404
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
