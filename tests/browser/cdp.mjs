// Drives headless Chromium over the DevTools protocol, for pages that --dump-dom cannot wait for
// (speedscope loads its profile asynchronously, and reports an import error with alert()).
//
//   node --experimental-websocket tests/browser/cdp.mjs URL OUT.png EXPRESSION [WAIT_MS [UNTIL]]
//
// Opens URL, waits WAIT_MS (default 4000), prints the JSON value of EXPRESSION evaluated in the page,
// and saves a screenshot. With UNTIL (an expression), the wait ends as soon as UNTIL is true in the
// page, WAIT_MS being the most it waits: a fixed wait was too short on a loaded machine. Exit status 3 when the page opened a dialog (its text goes to stderr).
// Needs Node 20 or later (WebSocket behind --experimental-websocket there, built in from 22).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';

const [url, png, expression, waitArg, until] = process.argv.slice(2);
const wait = Number(waitArg || 4000);
const profile = mkdtempSync('/tmp/gpuguard-cdp-');
const chrome = spawn(process.env.CHROMIUM || 'chromium', [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-extensions',
  `--user-data-dir=${profile}`, '--remote-debugging-port=0', '--window-size=1280,800', 'about:blank'], {stdio: 'ignore'});
const sleep = ms => new Promise(r => setTimeout(r, ms));
// Removes the profile once Chromium has exited: removed while it still wrote there (slow on a loaded
// machine), the removal failed with ENOTEMPTY and took the test's exit status with it.
function finish(code) {
  const cleanup = () => {
    try { rmSync(profile, {recursive: true, force: true, maxRetries: 10, retryDelay: 100}); } catch (e) {
      console.error(`cdp.mjs: could not remove ${profile}: ${e.message}`);
    }
    process.exit(code);
  };
  if (chrome.exitCode !== null || chrome.signalCode !== null) return cleanup();
  chrome.once('exit', cleanup);
  chrome.kill();
  setTimeout(cleanup, 5000);  // a Chromium that ignores the signal: leave anyway
}
setTimeout(() => { console.error('cdp.mjs: timed out'); finish(2); }, wait + 30000);

// Chromium writes the port it picked into DevToolsActivePort in its profile.
let port = null;
for (let i = 0; i < 200 && !port; i++) {
  await sleep(100);
  if (existsSync(`${profile}/DevToolsActivePort`)) port = readFileSync(`${profile}/DevToolsActivePort`, 'utf8').split('\n')[0];
}
if (!port) { console.error('cdp.mjs: Chromium did not start'); finish(2); }
const targets = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
const ws = new WebSocket(targets.find(t => t.type === 'page').webSocketDebuggerUrl);
await new Promise(r => { ws.onopen = r; });
let nextId = 0, dialog = false;
const pending = new Map();
ws.onmessage = m => {
  const d = JSON.parse(m.data);
  if (d.method === 'Page.javascriptDialogOpening') {
    dialog = true;
    console.error('dialog: ' + d.params.message);
    ws.send(JSON.stringify({id: 1e9, method: 'Page.handleJavaScriptDialog', params: {accept: true}}));
  }
  if (pending.has(d.id)) { pending.get(d.id)(d); pending.delete(d.id); }
};
const call = (method, params = {}) => new Promise(r => { pending.set(++nextId, r); ws.send(JSON.stringify({id: nextId, method, params})); });
await call('Page.enable');
await call('Page.navigate', {url});
if (until) {
  for (const end = Date.now() + wait; Date.now() < end && !dialog; await sleep(250)) {
    const u = await call('Runtime.evaluate', {expression: until, returnByValue: true});
    if (u.result && u.result.result && u.result.result.value) break;
  }
} else {
  await sleep(wait);
}
const v = await call('Runtime.evaluate', {expression, returnByValue: true});
console.log(JSON.stringify(v.result && v.result.result ? v.result.result.value : null));
const shot = await call('Page.captureScreenshot', {format: 'png'});
if (shot.result) writeFileSync(png, Buffer.from(shot.result.data, 'base64'));
finish(dialog ? 3 : 0);
