// The demo page in a real browser (Debian's Chromium driven by
// playwright-core): two users editing one document, remote cursors,
// presence list, away and offline, a dead server and reconnection.
import { test } from "node:test"
import assert from "node:assert/strict"
import { mkdirSync } from "node:fs"
import { join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { start, defer, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"
import { useBrowser, openDemo } from "./pages.mjs"

const root = resolve(fileURLToPath(import.meta.url), "../../../..")
const artifacts = process.env.TANDEM_ARTIFACTS ?? join(root, "test-artifacts")

useBrowser()

// open loads the demo as the named user with the given color.
function open(t, url, { name, color, query = "" }) {
  const q = new URLSearchParams(query)
  q.set("name", name)
  q.set("color", color)
  return openDemo(t, url, { query: q })
}

// people returns the presence list as {name: status}.
function people(page) {
  return page.evaluate(() =>
    Object.fromEntries(
      Array.from(document.querySelectorAll("#people li"), li => [
        li.querySelector(".name").textContent.replace(" (you)", ""),
        li.dataset.status,
      ]),
    ),
  )
}

// remoteCaret returns where the caret of the named user is drawn: the
// document position CodeMirror gives its DOM node, the text after it and
// whether it is dimmed; undefined if none is drawn.
function remoteCaret(page, name) {
  return page.evaluate(name => {
    const el = document.querySelector(`.cm-remote-caret[data-name="${name}"]`)
    if (!el) return undefined
    const view = window.tandemDemo.view
    const pos = view.posAtDOM(el)
    return { pos, after: view.state.doc.sliceString(pos, pos + 3), away: el.classList.contains("cm-remote-away") }
  }, name)
}

const editorText = page => page.evaluate(() => window.tandemDemo.view.state.doc.toString())

async function twoUsers(t, query = "") {
  const node = await start(t)
  const ana = await open(t, node.http + "/", { name: "Ana", color: "#e5484d" })
  await ana.waitForFunction(() => location.hash.length > 1)
  const docURL = ana.url()
  const bo = await open(t, docURL, { name: "Bo", color: "#0090ff", query })
  return { node, ana, bo, docURL }
}

test("two pages edit one document and see each other's cursors and status", async t => {
  const { ana, bo } = await twoUsers(t)

  // Both are listed online on both pages.
  await until("both online on Ana's page", async () => (await people(ana)).Bo === "online")
  await until("both online on Bo's page", async () => (await people(bo)).Ana === "online")
  assert.deepEqual(await people(ana), { Ana: "online", Bo: "online" })

  // Text typed in one page appears in the other.
  await ana.click(".cm-content")
  await ana.keyboard.press("Control+a")
  await ana.keyboard.type("abcdef")
  await until("Ana's text on Bo's page", async () => (await editorText(bo)) === "abcdef")

  // Bo puts his caret between "abc" and "def"; Ana sees it there.
  await bo.click(".cm-content")
  await bo.keyboard.press("Control+Home")
  for (let i = 0; i < 3; i++) await bo.keyboard.press("ArrowRight")
  await until("Bo's caret at 3 on Ana's page", async () => (await remoteCaret(ana, "Bo"))?.pos === 3)
  assert.equal((await remoteCaret(ana, "Bo")).after, "def")

  // Ana inserts text before it: the caret stays on the same character.
  await ana.keyboard.press("Control+Home")
  await ana.keyboard.type("XYZ")
  await until("Ana's insert on Bo's page", async () => (await editorText(bo)) === "XYZabcdef")
  await until("Bo's caret moved to 6", async () => (await remoteCaret(ana, "Bo"))?.pos === 6)
  assert.equal((await remoteCaret(ana, "Bo")).after, "def")
  // Ana's own caret is drawn on Bo's page after her insert.
  await until("Ana's caret at 3 on Bo's page", async () => (await remoteCaret(bo, "Ana"))?.pos === 3)

  // A selection is drawn in the selector's color.
  await bo.keyboard.press("Shift+ArrowRight")
  await bo.keyboard.press("Shift+ArrowRight")
  await until("Bo's selection on Ana's page", () =>
    ana.evaluate(() => document.querySelector(".cm-remote-selection")?.textContent === "de"),
  )

  // Typing shows on the other page.
  await ana.keyboard.type("!")
  await until("typing indicator on Bo's page", async () => (await bo.textContent("#typing")) === "Ana is typing…")

  mkdirSync(artifacts, { recursive: true })
  await ana.screenshot({ path: join(artifacts, "demo-two-users.png") })
})

test("an idle page turns away and back; a closed page turns offline within 2 s", async t => {
  const { ana, bo } = await twoUsers(t, "idle=1000")
  await bo.click(".cm-content")
  await until("Bo's caret drawn on Ana's page", async () => (await remoteCaret(ana, "Bo")) !== undefined)

  // Bo does nothing for a second: away on Ana's page, his caret dimmed.
  await until("Bo away", async () => (await people(ana)).Bo === "away")
  await until("Bo's caret dimmed", async () => (await remoteCaret(ana, "Bo"))?.away === true)
  // Activity brings him back.
  await bo.mouse.move(200, 200)
  await bo.mouse.move(220, 240)
  await until("Bo online again", async () => (await people(ana)).Bo === "online")

  // Bo closes his tab: offline with a last-seen time, caret removed.
  const closed = Date.now()
  await bo.close()
  await until("Bo offline", async () => (await people(ana)).Bo === "offline")
  const took = Date.now() - closed
  assert.ok(took < 2000, `Bo turned offline after ${took} ms`)
  assert.equal(await remoteCaret(ana, "Bo"), undefined)
  assert.match(await ana.textContent('#people li[data-status="offline"] .meta'), /^last seen \d+ s ago$/)
})

test("a frozen server is detected by missed heartbeat acks; edits made meanwhile sync after reconnection", async t => {
  const node = await start(t)
  const ana = await open(t, node.http + "/", { name: "Ana", color: "#e5484d", query: "heartbeat=300" })
  await ana.waitForFunction(() => location.hash.length > 1)
  const docURL = ana.url()

  // The server stops answering but its socket stays open: only the
  // heartbeat check can tell.
  node.proc.kill("SIGSTOP")
  let resumed = false
  defer(t, () => resumed || node.proc.kill("SIGCONT"))
  await ana.waitForSelector('#connection[data-state="closed"]', { timeout: 10_000 })
  await ana.click(".cm-content")
  await ana.keyboard.press("Control+a")
  await ana.keyboard.type("written while the server was frozen")

  node.proc.kill("SIGCONT")
  resumed = true
  await ana.waitForSelector('#connection[data-state="open"]', { timeout: 20_000 })

  // After the reconnection a newcomer sees Ana by name.
  const bo = await open(t, docURL, { name: "Bo", color: "#0090ff" })
  await until("Ana listed on Bo's page", async () => (await people(bo)).Ana === "online")
  assert.equal((await people(bo)).anonymous, undefined)

  // A stock automerge-repo client gets the offline edit from the server.
  const repo = client(t, node.url)
  await connected(repo)
  const id = decodeURIComponent(new URL(docURL).hash.slice(1))
  const handle = await repo.find(`automerge:${id}`)
  await until("the offline edit on the server", () => handle.doc().text === "written while the server was frozen")
})

test("a mention typed in one page lights the other user's bell at once; reading it clears it", async t => {
  const node = await start(t, { args: ["--notify-window", "300ms"] })
  const suffix = Math.random().toString(36).slice(2, 8)
  const [anaID, boID] = [`ana-${suffix}`, `bo-${suffix}`]
  const ana = await open(t, node.http + "/", { name: "Ana", color: "#e5484d", query: `user=${anaID}` })
  await ana.waitForFunction(() => location.hash.length > 1)
  const bo = await open(t, ana.url(), { name: "Bo", color: "#0090ff", query: `user=${boID}` })
  await until("both online", async () => (await people(ana)).Bo === "online")
  assert.equal(await bo.isVisible("#bell-count"), false, "no unread notification yet")

  await ana.click(".cm-content")
  await ana.keyboard.press("Control+End")
  await ana.keyboard.type(`\nping @${boID} please`)
  await bo.waitForFunction(() => document.querySelector("#bell-count")?.textContent === "1", null, { timeout: 20_000 })
  await bo.click("#bell")
  const item = bo.locator("#notifications .notification").first()
  await item.waitFor()
  assert.match(await item.textContent(), /Ana mentioned you in Welcome to Tandem/)
  assert.equal(await item.getAttribute("data-read"), "false")
  await bo.click("#mark-all-read")
  await bo.waitForFunction(() => {
    const c = document.querySelector("#bell-count")
    return !c || c.textContent === "0" || getComputedStyle(c).display === "none" || c.hidden
  })
  mkdirSync(artifacts, { recursive: true })
  await bo.screenshot({ path: join(artifacts, "demo-notifications.png") })
})
