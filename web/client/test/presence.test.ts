import { test } from "node:test"
import assert from "node:assert/strict"
import * as A from "@automerge/automerge"
import type { DocHandle } from "@automerge/automerge-repo"
import { TandemPresence, normalizeColor, type PeerView } from "../src/presence.js"
import { pair, waitFor } from "./pair.js"

type Doc = { text: string }

async function twoPeers(t: { after(fn: () => void | Promise<void>): void }) {
  const [ra, rb] = pair()
  t.after(async () => {
    await ra.shutdown()
    await rb.shutdown()
  })
  const ha = ra.create<Doc>({ text: "hello world" })
  const hb = await rb.find<Doc>(ha.url)
  const ana = new TandemPresence(ha as DocHandle<unknown>, { user: { id: "ana", name: "Ana", color: "#e66" } })
  const bo = new TandemPresence(hb as DocHandle<unknown>, { user: { id: "bo", name: "Bo", color: "#36c" } })
  const joined = waitFor<[PeerView]>(l => bo.on("join", l), p => p.user.id === "ana")
  bo.start()
  ana.start()
  await joined
  t.after(() => {
    ana.stop()
    bo.stop()
  })
  return { ha, hb, ana, bo }
}

test("a remote cursor stays on its character when text is inserted before it", async t => {
  const { hb, ana, bo } = await twoPeers(t)
  const moved = waitFor<[PeerView, string]>(l => bo.on("change", l), (p, ch) => ch === "cursor" && p.cursor !== null)
  ana.setSelection(6, 6) // before "world"
  const [peer] = await moved
  assert.deepEqual(bo.positionOf(peer), { anchor: 6, head: 6 })
  hb.change(d => A.splice(d, ["text"], 0, 0, ">> "))
  assert.equal(hb.doc()!.text.slice(bo.positionOf(peer)!.head), "world")
  assert.deepEqual(bo.positionOf(peer), { anchor: 9, head: 9 })
})

test("a selection travels as two cursors and clears to null", async t => {
  const { ana, bo } = await twoPeers(t)
  const selected = waitFor<[PeerView, string]>(l => bo.on("change", l), (_p, ch) => ch === "selection")
  ana.setSelection(0, 5)
  const [peer] = await selected
  assert.deepEqual(bo.positionOf(peer), { anchor: 0, head: 5 })
  const cleared = waitFor<[PeerView, string]>(l => bo.on("change", l), (p, ch) => ch === "selection" && p.selection === null)
  ana.setSelection(3, 3)
  await cleared
  assert.deepEqual(bo.positionOf(peer), { anchor: 3, head: 3 })
})

test("a burst of cursor moves is throttled and the newest one wins", async t => {
  const { ana, bo } = await twoPeers(t)
  const heads: number[] = []
  bo.on("change", (p, ch) => {
    if (ch === "cursor") heads.push(bo.positionOf(p)!.head)
  })
  const last = waitFor<[PeerView, string]>(l => bo.on("change", l), (p, ch) => ch === "cursor" && bo.positionOf(p)?.head === 10)
  for (let i = 0; i <= 10; i++) ana.setSelection(i, i)
  await last
  assert.equal(heads[0], 0, "the first move goes at once")
  assert.ok(heads.length <= 3, `11 moves in one burst became ${heads.length} sends: ${heads}`)
  assert.equal(heads.at(-1), 10)
})

test("typing is one message per burst", async t => {
  const { ana, bo } = await twoPeers(t)
  let typingMessages = 0
  bo.on("change", (_p, ch) => ch === "typing" && typingMessages++)
  const typing = waitFor<[PeerView, string]>(l => bo.on("change", l), (p, ch) => ch === "typing" && p.typing)
  for (let i = 0; i < 20; i++) ana.typing()
  const [peer] = await typing
  assert.equal(peer.typing, true)
  assert.equal(bo.users().find(u => u.user.id === "ana")!.typing, true)
  // Anything sent after the burst arrives after its typing message; no second one came.
  const marker = waitFor<[PeerView, string]>(l => bo.on("change", l), (_p, ch) => ch === "marker")
  ana.set("marker", 1)
  await marker
  assert.equal(typingMessages, 1)
})

test("status changes reach peers; goodbye turns the user offline with a last-seen time", async t => {
  const { ana, bo } = await twoPeers(t)
  const away = waitFor<[PeerView, string]>(l => bo.on("change", l), (p, ch) => ch === "status" && p.status === "away")
  ana.setStatus("away")
  await away
  assert.equal(bo.users().find(u => u.user.id === "ana")!.status, "away")
  const left = waitFor<[PeerView]>(l => bo.on("leave", l), p => p.user.id === "ana")
  const before = Date.now()
  ana.stop()
  await left
  assert.deepEqual(bo.peers(), [])
  const u = bo.users().find(u => u.user.id === "ana")!
  assert.equal(u.status, "offline")
  assert.ok(u.lastSeenAt >= before)
  // Back again: online, and no longer listed as offline.
  const back = waitFor<[PeerView]>(l => bo.on("join", l), p => p.user.id === "ana")
  ana.start()
  await back
  assert.deepEqual(bo.users().map(u => [u.user.id, u.status]), [["ana", "away"]])
})

test("peer values are sanitised: a bad color or user does not reach the page", async t => {
  const { ana, bo } = await twoPeers(t)
  const changed = waitFor<[PeerView, string]>(l => bo.on("change", l), (_p, ch) => ch === "user")
  ana.set("user", { id: "ana", name: "Ana", color: "red;background:url(x)" })
  const [peer] = await changed
  assert.equal(peer.user.color, "#888888")
})

test("a position that did not change character is not sent again", async t => {
  const { ana, bo } = await twoPeers(t)
  let sends = 0
  bo.on("change", (_p, ch) => ch === "cursor" && sends++)
  const first = waitFor<[PeerView, string]>(l => bo.on("change", l), (_p, ch) => ch === "cursor")
  ana.setSelection(2, 2)
  await first
  ana.setSelection(2, 2) // e.g. the editor re-reporting after a remote edit
  const marker = waitFor<[PeerView, string]>(l => bo.on("change", l), (_p, ch) => ch === "marker")
  ana.set("marker", 1)
  await marker
  assert.equal(sends, 1)
})

test("announce sends the whole state again, as after a reconnection", async t => {
  const { ana, bo } = await twoPeers(t)
  ana.setStatus("away")
  const snap = waitFor<[PeerView, string]>(l => bo.on("change", l), (_p, ch) => ch === "snapshot")
  ana.announce()
  const [peer] = await snap
  assert.deepEqual([peer.user.name, peer.status], ["Ana", "away"])
})

test("colors are normalised to #rrggbb", () => {
  assert.equal(normalizeColor("#ABC"), "#aabbcc")
  assert.equal(normalizeColor("#abcd"), "#aabbcc")
  assert.equal(normalizeColor("#12345678"), "#123456")
  assert.equal(normalizeColor("#12345"), "#888888")
  assert.equal(normalizeColor("red"), "#888888")
  assert.equal(normalizeColor(7), "#888888")
})
