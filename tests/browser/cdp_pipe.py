#!/usr/bin/env python3
"""Drives headless Chromium over the DevTools protocol on a pipe, with only the standard library: for
checks that must act on a page (click a button) and read what it drew afterwards, which --dump-dom
cannot do. cdp.mjs does the same over a WebSocket but needs Node 20; this needs Chromium and Python,
which the browser tests need anyway.

    cdp_pipe.py URL EXPRESSION [WAIT_MS]

Opens URL, waits for its load event and WAIT_MS more (default 0), evaluates EXPRESSION in the page and
prints its value as JSON (an exception thrown by it is printed to stderr, exit status 1). Exit status
2 when Chromium did not start or answer within a minute (generous: the test machines are shared).

With --remote-debugging-pipe Chromium reads commands from its fd 3 and writes answers and events to
its fd 4, each a JSON message ended by a NUL byte.
"""
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, binary):
        self.profile = tempfile.mkdtemp(prefix='gpuguard-cdp-')
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                '--disable-background-networking', '--disable-component-update', '--disable-sync',
                '--disable-extensions', '--hide-scrollbars', '--window-size=1280,900',
                '--user-data-dir=' + self.profile, '--remote-debugging-pipe', 'about:blank']
        # bash puts the pipe's ends on fds 3 and 4, where Chromium looks for them.
        self.proc = subprocess.Popen(
            ['bash', '-c', 'exec "$0" "$@" 3<&%d 4>&%d' % (to_chrome_r, from_chrome_w), binary] + args,
            pass_fds=(to_chrome_r, from_chrome_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer = b''
        self.next_id = 0
        self.events = []

    def close(self):
        try:
            self.proc.terminate()
            self.proc.wait(timeout=5)
        except Exception:
            self.proc.kill()
        for fd in (self.to_chrome, self.from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def _message(self, deadline):
        while b'\0' not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_chrome], [], [], left)[0]:
                raise TimeoutError('Chromium did not answer within a minute')
            chunk = os.read(self.from_chrome, 1 << 20)
            if not chunk:
                raise TimeoutError('Chromium closed its pipe')
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b'\0', 1)
        return json.loads(raw)

    def call(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        msg = {'id': self.next_id, 'method': method, 'params': params or {}}
        if session:
            msg['sessionId'] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b'\0')
        deadline = time.monotonic() + timeout
        while True:
            m = self._message(deadline)
            if m.get('id') == self.next_id:
                if 'error' in m:
                    raise RuntimeError('%s: %s' % (method, m['error']))
                return m.get('result', {})
            self.events.append(m)

    def wait_event(self, method, session, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            for i, m in enumerate(self.events):
                if m.get('method') == method and m.get('sessionId') == session:
                    return self.events.pop(i)
            self.events.append(self._message(deadline))


def main():
    url, expression = sys.argv[1], sys.argv[2]
    wait_ms = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    binary = os.environ.get('CHROMIUM') or shutil.which('chromium') or shutil.which('chromium-browser')
    if not binary:
        print('cdp_pipe.py: no Chromium', file=sys.stderr)
        return 2
    browser = Browser(binary)
    try:
        target = browser.call('Target.createTarget', {'url': 'about:blank'})['targetId']
        session = browser.call('Target.attachToTarget', {'targetId': target, 'flatten': True})['sessionId']
        browser.call('Page.enable', session=session)
        browser.call('Page.navigate', {'url': url}, session=session)
        browser.wait_event('Page.loadEventFired', session)
        time.sleep(wait_ms / 1000)
        result = browser.call('Runtime.evaluate', {'expression': expression, 'returnByValue': True}, session=session)
    except (TimeoutError, RuntimeError, OSError) as e:
        print('cdp_pipe.py: %s' % e, file=sys.stderr)
        return 2
    finally:
        browser.close()
    if 'exceptionDetails' in result:
        d = result['exceptionDetails']
        print('cdp_pipe.py: the expression threw: %s' % d.get('exception', {}).get('description', d.get('text')),
              file=sys.stderr)
        return 1
    print(json.dumps(result['result'].get('value')))
    return 0


if __name__ == '__main__':
    sys.exit(main())
