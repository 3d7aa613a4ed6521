"""What `make setup` provides, exercised for real: the browser, the model cache, the rootfs."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from envs.browser import browser_unavailable_reason, launch_chromium
from envs.sandbox import default_rootfs
from tests.helpers import require


@pytest.mark.browser
def test_playwright_drives_the_system_chromium():
    require(browser_unavailable_reason() is None, str(browser_unavailable_reason()))
    from playwright.sync_api import sync_playwright

    page_html = b"<html><body><h1>clawgym</h1><button onclick=\"this.textContent='done'\">go</button></body></html>"

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page_html)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
            page.get_by_role("button", name="go").click()
            snapshot = page.locator("body").aria_snapshot()
            browser.close()
    finally:
        server.shutdown()
    assert 'heading "clawgym"' in snapshot and 'button "done"' in snapshot


def test_the_default_model_cache_loads_and_generates():
    from agents.model_cache import default_model_dir

    model_dir = default_model_dir()
    require((model_dir / "model.safetensors").exists(),
            f"no model cache at {model_dir}: run `make setup` (or python -m scripts.cache_model)")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "4" in answer


def test_the_sandbox_rootfs_is_the_suites_own():
    root = default_rootfs()
    require((root / "bin" / "bash").exists(), f"no sandbox rootfs at {root}: run `make rootfs` as root")
    assert root.resolve() != Path("/")
    for tool in ("python3", "git", "jq", "sqlite3"):
        assert (root / "usr" / "bin" / tool).exists(), tool
    assert (root / "workspace").is_dir() and (root / "etc" / "hostname").read_text().strip() == "clawgym-sandbox"
