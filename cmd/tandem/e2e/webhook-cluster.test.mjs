// End-to-end: webhooks from a cluster of three nodes over a real Redis
// and PostgreSQL, told to receivers that verify every delivery with svix.
// Each event is decided by one node: a document edited on all three
// within one debounce window is one document.changed, a user's tabs on
// all three enter once and leave once. An endpoint that takes 10 s to
// answer slows neither the clients' edits and presence nor the
// deliveries to another endpoint. (webhook-outage.test.mjs: a receiver
// down while a node is killed.)
import { test } from "node:test"
import assert from "node:assert/strict"
import { randomBytes } from "node:crypto"
import { until } from "./server.mjs"
import { client, connected } from "./clients.mjs"
import { cluster, heads, present, presenceTrip, receiver, repeats, roundTrip, run, tab, token, type, windowOpen } from "./hooks.mjs"

test("a document edited on three nodes in one window is one document.changed; tabs on three nodes enter and leave once", async t => {
  const secret = "whsec_" + randomBytes(32).toString("base64")
  const hooks = await receiver(t, secret)
  const { nodes: [n1, n2, n3] } = await cluster(t, "c", [hooks.url], secret)
  const [ana, bo, cy, dee] = ["ana", "bo", "cy", "dee"].map(n => `${n}-${run}-c`)

  const a = await connected(client(t, `${n1.url}?token=${token({ sub: ana })}`))
  const ha = a.create({ text: "" })
  const doc = ha.documentId
  const b = await connected(client(t, `${n2.url}?token=${token({ sub: bo })}`))
  const c = await connected(client(t, `${n3.url}?token=${token({ sub: cy })}`))
  const [hb, hc] = [await b.find(ha.url), await c.find(ha.url)]
  // The creation's window closes first: the three edits then open one.
  await until("the creation's document.changed", () =>
    hooks.ofType("document.changed").some(e => e.data.documentId === doc) && !windowOpen(doc), 20000)
  type(ha, "a")
  type(hb, "b")
  type(hc, "c")
  await until("the three edits everywhere", () => [ha, hb, hc].every(h => h.doc().text.length === 3), 10000)
  const final = heads(ha)
  await until("document.changed naming the three", () =>
    hooks.ofType("document.changed").some(e => e.data.documentId === doc && e.data.users.length === 3), 20000)

  // dee has a tab on each node; the last one out leaves.
  const tabs = []
  for (const n of [n1, n2, n3]) tabs.push(await tab(t, n, dee, ha.url))
  await until("dee's three tabs mirrored", () => present(dee, doc) === 3, 20000)
  await until("presence.entered", () => hooks.ofType("presence.entered").some(e => e.data.userId === dee), 20000)
  await tabs[0].close()
  await tabs[1].close()
  await until("two of dee's tabs gone", () => present(dee, doc) === 1, 20000)
  await until("the deliveries so far done", () => hooks.waiting() === "0", 20000)
  assert.deepEqual(hooks.ofType("presence.left").filter(e => e.data.userId === dee), [], "dee is still in the document")
  await tabs[2].close()
  await until("presence.left", () => hooks.ofType("presence.left").some(e => e.data.userId === dee), 20000)
  await until("dee offline", () => hooks.ofType("user.status").some(e => e.data.userId === dee && e.data.status === "offline"), 20000)
  await until("no window open and the deliveries done", () => !windowOpen(doc) && hooks.waiting() === "0", 20000)

  const changed = hooks.ofType("document.changed").filter(e => e.data.documentId === doc)
    .sort((x, y) => x.data.firstChangeAt - y.data.firstChangeAt)
  assert.equal(changed.length, 2, JSON.stringify(changed))
  assert.deepEqual(changed[0].data.users, [ana], "the creation's window")
  assert.deepEqual(changed[1].data.users, [ana, bo, cy].sort(), "one window for the three edits")
  assert.deepEqual(changed[1].data.heads, final, "the window names the merged heads")
  assert.deepEqual(hooks.ofType("document.created").map(e => e.data), [{ documentId: doc, users: [ana] }])
  const of = typ => hooks.ofType(typ).filter(e => e.data.userId === dee).map(e => e.data.documentId ?? e.data.status)
  assert.deepEqual(of("presence.entered"), [doc])
  assert.deepEqual(of("presence.left"), [doc])
  const statuses = hooks.ofType("user.status").filter(e => e.data.userId === dee).sort((x, y) => x.data.at - y.data.at)
  assert.deepEqual(statuses.map(e => e.data.status), ["online", "offline"])
  assert.equal(hooks.bad, 0, "every delivery verified")
  assert.deepEqual(repeats(hooks), [])
})

test("an endpoint that takes 10 s to answer slows neither the clients nor another endpoint", async t => {
  const secret = "whsec_" + randomBytes(32).toString("base64")
  const slow = await receiver(t, secret)
  slow.delay = 10500 // past the node's 10 s: every attempt holds a worker as long as one can
  const quick = await receiver(t, secret)
  const { nodes } = await cluster(t, "s", [slow.url, quick.url], secret)
  const users = ["ana", "bo", "cy"].map(n => `${n}-${run}-s`)
  // A user on each node, each creating documents and present in them:
  // more deliveries than the slow endpoint's workers on every node.
  const tabs = []
  for (let i = 0; i < 3; i++) {
    for (let j = 0; j < 3; j++) tabs.push(await tab(t, nodes[i], users[i], j > 0 ? tabs[3 * i].handle.url : undefined))
  }
  const docs = [...new Set(tabs.map(x => x.handle.documentId))]
  for (const x of tabs) type(x.handle, "x")
  await until("the documents' creation told to the quick endpoint", () =>
    docs.every(d => quick.ofType("document.created").some(e => e.data.documentId === d)), 20000)
  await until("the slow endpoint busy", () => Number(slow.waiting()) > 0, 10000)

  // Round trips between nodes while the slow endpoint holds its workers.
  const peer = await tab(t, nodes[1], users[1], tabs[0].handle.url)
  const edits = [], cursors = []
  for (let i = 0; i < 5; i++) {
    edits.push(await roundTrip(tabs[0].handle, peer.handle, `<${i}>`))
    cursors.push(await presenceTrip(tabs[0], peer, `s${i}`))
  }
  t.diagnostic(`with the slow endpoint: edit n1→n2 ${edits.map(Math.round).join(" ")} ms, cursor ${cursors.map(Math.round).join(" ")} ms`)
  assert.ok(Math.max(...edits) < 2000 && Math.max(...cursors) < 2000, `edits ${edits} ms, cursors ${cursors} ms`)

  // An edit now is told to the quick endpoint once its window closes
  // (1 s of debounce), as if the slow one were not there.
  const t0 = Date.now()
  type(tabs[3].handle, "now")
  const want = heads(tabs[3].handle)
  const doc = tabs[3].handle.documentId
  await until("the edit told to the quick endpoint", () => quick.ofType("document.changed").some(e =>
    e.data.documentId === doc && JSON.stringify(e.data.heads) === JSON.stringify(want)), 20000)
  const took = Date.now() - t0
  t.diagnostic(`document.changed at the quick endpoint ${took} ms after the edit; ${slow.waiting()} deliveries waiting for the slow one`)
  assert.ok(took < 5000, `${took} ms`)
  assert.ok(Number(slow.waiting()) > 0, "the slow endpoint still had deliveries waiting")
  assert.equal(quick.bad + slow.bad, 0)
})
