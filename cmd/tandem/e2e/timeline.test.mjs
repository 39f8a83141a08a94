// The demo page's "Today" timeline in a real browser against the real
// binary's presence history: a page and a stock automerge-repo client in
// one document, shown as the history API answers, page after page, and
// kept up to date as they come, turn away and leave.
import { test } from "node:test"
import assert from "node:assert/strict"
import { Presence } from "@automerge/automerge-repo"
import { start, defer, until } from "./server.mjs"
import { client, connected } from "./clients.mjs"
import { useBrowser, openDemo } from "./pages.mjs"

useBrowser()

// history reads a document's presence intervals overlapping [from, now),
// every page of them.
async function history(node, docId, from) {
  const intervals = []
  let next = null
  do {
    const q = new URLSearchParams(from ? { from } : {})
    if (next) q.set("after", next)
    const res = await fetch(`${node.http}/api/docs/${docId}/presence/history?${q}`)
    assert.equal(res.status, 200, await res.clone().text())
    const page = await res.json()
    intervals.push(...page.intervals)
    next = page.next
  } while (next)
  return intervals
}

// drawn returns what the timeline shows: its window's start, its rows and
// its bars, as their data attributes and labels say.
function drawn(page) {
  return page.evaluate(() => {
    const root = document.querySelector("#timeline")
    return {
      from: root.dataset.from,
      rows: Array.from(root.querySelectorAll(".timeline-row"), li => ({
        user: li.dataset.user,
        label: li.querySelector(".timeline-label").textContent,
      })),
      bars: Array.from(root.querySelectorAll(".timeline-bar"), b => ({
        user: b.dataset.user,
        row: b.closest(".timeline-row").dataset.user,
        status: b.dataset.status,
        from: b.dataset.from,
        to: b.dataset.to,
        label: b.getAttribute("aria-label"),
        title: b.title,
      })),
    }
  })
}

const key = iv => `${iv.user} ${iv.status} ${iv.from} ${iv.to ?? ""}`

// shown waits until the timeline shows exactly the intervals the API
// answers for its window, and returns both.
function shown(page, node, docId, what) {
  return until(what, async () => {
    const d = await drawn(page)
    if (!d.from) return false
    const api = await history(node, docId, d.from)
    const same = JSON.stringify(d.bars.map(key).sort()) === JSON.stringify(api.map(key).sort())
    return same && { d, api }
  }, 15_000)
}

// users lists the users of intervals in the order they first appear.
const users = ivs => [...new Map(ivs.map(iv => [iv.user, iv.name || iv.user])).entries()].map(([user, label]) => ({ user, label }))

test("the Today timeline shows each user's stretches online and away as the history API answers them", async t => {
  const node = await start(t)
  const suffix = Math.random().toString(36).slice(2, 8)
  const [anaID, boID] = [`ana-${suffix}`, `bo-${suffix}`]
  // Ana's page turns away after a second without input, and reads the
  // history one interval a page, so that it has to follow next.
  const ana = await openDemo(t, node.http + "/", { query: { user: anaID, name: "Ana", idle: "1000", historyLimit: "1" }, height: 800 })
  const reads = []
  ana.on("request", r => {
    if (r.url().includes("/presence/history")) reads.push(new URL(r.url()).searchParams)
  })
  await ana.waitForFunction(() => location.hash.length > 1)
  const docId = await ana.evaluate(() => decodeURIComponent(location.hash.slice(1)))

  await until("Ana online, then away, in the history", async () => {
    const ivs = (await history(node, docId)).filter(iv => iv.user === anaID)
    return ivs.some(iv => iv.status === "online" && iv.to !== null) && ivs.some(iv => iv.status === "away" && iv.to === null)
  })

  // Bo comes with a stock client.
  const repo = await connected(client(t, node.url))
  const handle = await repo.find(`automerge:${docId}`)
  const bo = new Presence({ handle })
  bo.start({ initialState: { user: { id: boID, name: "Bo" } } })
  defer(t, () => bo.running && bo.stop())
  await until("both users in the history", async () => {
    const ivs = await history(node, docId)
    return ivs.some(iv => iv.user === anaID) && ivs.some(iv => iv.user === boID && iv.to === null)
  })

  const { d, api } = await shown(ana, node, docId, "the timeline showing Ana and Bo")
  // One row per user the API answers, labelled with their names, in the
  // order they came.
  assert.deepEqual(users(api), [{ user: anaID, label: "Ana" }, { user: boID, label: "Bo" }])
  assert.deepEqual(d.rows, users(api))
  assert.equal(Date.parse(d.from), await ana.evaluate(() => new Date(new Date().setHours(0, 0, 0, 0)).getTime()), "the window starts at local midnight")
  for (const b of d.bars) {
    assert.equal(b.row, b.user, "a bar is in its user's row")
    const label = d.rows.find(r => r.user === b.user).label
    assert.ok(b.label.startsWith(`${label}, ${b.status}, `), b.label)
    assert.equal(b.title, b.label)
    assert.equal(b.label.endsWith("–now"), b.to === "", `${b.label}: open bars, and only they, run to now`)
  }
  assert.deepEqual(
    d.bars.map(b => `${b.user} ${b.status} ${b.to === "" ? "open" : "closed"}`).sort(),
    [`${anaID} away open`, `${anaID} online closed`, `${boID} online open`].sort(),
  )
  // Three intervals at one a page: the page followed next.
  assert.ok(reads.some(q => q.get("limit") === "1" && q.has("after")), "no read followed next")

  // Open bars reach the right end (now); away looks unlike online.
  const look = await ana.evaluate(() =>
    Array.from(document.querySelectorAll("#timeline .timeline-bar"), b => {
      const bar = b.getBoundingClientRect()
      const track = b.parentElement.getBoundingClientRect()
      const css = getComputedStyle(b)
      return { status: b.dataset.status, open: b.dataset.to === "", gap: track.right - bar.right, width: bar.width, paint: css.backgroundColor + css.backgroundImage }
    }),
  )
  for (const b of look) {
    assert.ok(b.width >= 3, `a ${b.status} bar ${b.width}px wide`)
    if (b.open) assert.ok(Math.abs(b.gap) < 2, `an open ${b.status} bar ends ${b.gap}px before now`)
  }
  const paints = status => new Set(look.filter(b => b.status === status).map(b => b.paint))
  assert.equal(paints("online").size, 1)
  assert.equal(paints("away").size, 1)
  assert.notEqual([...paints("online")][0], [...paints("away")][0])

  // Bo leaves: the timeline ends his bar without a reload.
  await bo.stop()
  await until("Bo's interval ended in the history", async () =>
    (await history(node, docId)).some(iv => iv.user === boID && iv.to !== null),
  )
  const later = await shown(ana, node, docId, "the timeline ending Bo's bar")
  const boBars = later.d.bars.filter(b => b.user === boID)
  assert.equal(boBars.length, 1)
  assert.notEqual(boBars[0].to, "")
  assert.equal(boBars[0].to, later.api.find(iv => iv.user === boID).to)
  assert.match(boBars[0].label, /^Bo, online, .+–(?!now$).+$/)
})
