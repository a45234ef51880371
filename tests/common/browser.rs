//! Headless Chromium driven the way a person uses a page: open it, wait for
//! what shows, click where an element is drawn. Commands go over Chromium's
//! DevTools protocol on `--remote-debugging-pipe` (file descriptors 3 and 4,
//! NUL-separated JSON), so no WebSocket client is needed. Clicks are real
//! mouse events at the element's on-screen centre (`Input.dispatchMouseEvent`),
//! never `element.click()` from a script: a page whose click handler is
//! missing or broken shows nothing new, and the test waiting for it fails.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::proc::ChildGuard;

pub struct Browser {
    to: std::process::ChildStdin,
    from: mpsc::Receiver<Value>,
    next_id: u64,
    session: String,
    child: ChildGuard,
}

impl Drop for Browser {
    /// Ask Chromium to quit (its renderers go with it), then make sure.
    fn drop(&mut self) {
        let mut bytes = br#"{"id":0,"method":"Browser.close"}"#.to_vec();
        bytes.push(0);
        let _ = self.to.write_all(&bytes);
        self.child.terminate(Duration::from_secs(5));
    }
}

impl Browser {
    /// Start Chromium with a throwaway profile in `profile`, trusting the
    /// server key `pin` (see web_page.rs), and open `url` in a tab.
    pub fn open(url: &str, profile: &Path, pin: &str) -> Browser {
        let chromium = super::require_tool("chromium");
        // Chromium reads commands on descriptor 3 and answers on 4: the
        // shell moves our pipes there before it becomes Chromium.
        let log = profile.with_extension("log");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("exec 3<&0 4>&1; exec \"$@\" </dev/null >>\"$LOG\" 2>&1")
            .arg("sh")
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                "--window-size=1280,900",
            ])
            .arg(format!("--ignore-certificate-errors-spki-list={pin}"))
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .env("LOG", &log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("start chromium");
        let to = child.stdin.take().expect("chromium's command pipe");
        let answers = child.stdout.take().expect("chromium's answer pipe");
        let child = ChildGuard {
            name: "chromium".into(),
            child: Some(child),
        };
        let (tx, from) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(answers);
            let mut msg = Vec::new();
            while matches!(r.read_until(0, &mut msg), Ok(n) if n > 0) {
                if msg.last() == Some(&0) {
                    msg.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&msg)
                    && tx.send(v).is_err()
                {
                    return;
                }
                msg.clear();
            }
        });
        let mut b = Browser {
            to,
            from,
            next_id: 0,
            session: String::new(),
            child,
        };
        let t = b.call("Target.createTarget", json!({"url": url}));
        let target = t["targetId"].as_str().expect("targetId").to_string();
        let s = b.call(
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        b.session = s["sessionId"].as_str().expect("sessionId").to_string();
        b
    }

    /// One DevTools command; its result, or a panic with its error.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).expect("write to chromium");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .from
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("{method}: no answer from chromium: {e}"));
            if v["id"] == id {
                if !v["error"].is_null() {
                    panic!("{method}: {}", v["error"]);
                }
                return v["result"].clone();
            }
        }
    }

    /// The value of a JavaScript expression in the page.
    pub fn eval(&mut self, expr: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if !r["exceptionDetails"].is_null() {
            panic!("{expr}: {}", r["exceptionDetails"]);
        }
        r["result"]["value"].clone()
    }

    /// The page's visible text (`document.body.innerText`).
    pub fn text(&mut self) -> String {
        self.eval("document.body ? document.body.innerText : ''")
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Wait until `expr` is truthy in the page; panic with the page's text
    /// and `what` when it never is.
    pub fn wait_until(&mut self, expr: &str, what: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.eval(&format!("!!({expr})"));
            if v == json!(true) {
                return;
            }
            if Instant::now() >= deadline {
                panic!("{what}: never happened; the page shows:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Click the element `selector` finds with the mouse, at its centre.
    pub fn click(&mut self, selector: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        let at = self.eval(&format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return null; \
             e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); \
             return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ));
        let (Some(x), Some(y)) = (at[0].as_f64(), at[1].as_f64()) else {
            panic!(
                "nothing to click at {selector}; the page shows:\n{}",
                self.text()
            );
        };
        self.call(
            "Input.dispatchMouseEvent",
            json!({"type": "mouseMoved", "x": x, "y": y}),
        );
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }
}
