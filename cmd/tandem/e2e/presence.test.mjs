// End-to-end presence: stock automerge-repo Presence instances talk
// through the real tandem binary.
import { test } from "node:test"
import assert from "node:assert/strict"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { Presence } from "@automerge/automerge-repo"
import { defer, start, until } from "./server.mjs"
import { client, connected, watchStatuses } from "./clients.mjs"

// member opens the document in a new client and starts its Presence.
async function member(t, node, docUrl, initialState) {
  const repo = client(t, node.url)
  await until("the server peer", () => repo.peers.length > 0)
  const handle = await repo.find(docUrl)
  const presence = new Presence({ handle })
  const events = []
  for (const type of ["update", "snapshot", "goodbye", "heartbeat"]) {
    presence.on(type, e => events.push({ ...e, type, at: Date.now() }))
  }
  presence.start({ initialState })
  defer(t, () => presence.running && presence.stop())
  return { repo, handle, presence, events, peerId: repo.peerId }
}

function stateOf(m, peerId) {
  return m.presence.getPeerStates().value[peerId]?.value
}

// newDoc creates a document through a first client and returns its URL.
async function newDoc(t, node) {
  const repo = client(t, node.url)
  await until("the server peer", () => repo.peers.length > 0)
  const handle = repo.create({ text: "" })
  const check = client(t, node.url)
  await check.find(handle.url) // the server has it
  return handle.url
}

test("B sees A's cursor updates", async t => {
  const node = await start(t)
  const url = await newDoc(t, node)
  const a = await member(t, node, url, { user: { id: "ana" }, cursor: "s" })
  const b = await member(t, node, url, { user: { id: "bo" } })
  await until("B sees A", () => stateOf(b, a.peerId))
  for (const c of ["1@x", "2@x", "3@x"]) {
    a.presence.broadcast("cursor", c)
    await until(`B sees cursor ${c}`, () => stateOf(b, a.peerId)?.cursor === c)
  }
  // The server speaks status too, as a channel stock clients read.
  assert.equal(stateOf(b, a.peerId).status, "online")
})

test("C joining late sees A and B before any re-announcement", async t => {
  const node = await start(t)
  const url = await newDoc(t, node)
  const a = await member(t, node, url, { user: { id: "ana" }, cursor: "a" })
  const b = await member(t, node, url, { user: { id: "bo" }, cursor: "b" })
  await until("A and B see each other", () => stateOf(a, b.peerId) && stateOf(b, a.peerId))
  const started = Date.now()
  const c = await member(t, node, url, { user: { id: "cy" } })
  await until("C sees A and B", () => stateOf(c, a.peerId)?.cursor === "a" && stateOf(c, b.peerId)?.cursor === "b")
  const took = Date.now() - started
  t.diagnostic(`C saw both peers ${took} ms after starting`)
  // Stock peers re-announce 500 ms after seeing a newcomer and heartbeat
  // every 15 s: seeing both well before that means the server told C.
  assert.ok(took < 450, `C waited ${took} ms`)
})

test("A's socket closes: B gets goodbye within 1 s", async t => {
  const node = await start(t)
  const url = await newDoc(t, node)
  const a = await member(t, node, url, { cursor: "a" })
  const b = await member(t, node, url, { cursor: "b" })
  await until("B sees A", () => stateOf(b, a.peerId))
  const closed = Date.now()
  a.repo.close() // the socket closes; A's Presence never says goodbye itself
  const bye = await until("B's goodbye", () => b.events.find(e => e.type === "goodbye" && e.peerId === a.peerId))
  t.diagnostic(`goodbye ${bye.at - closed} ms after the close`)
  assert.ok(bye.at - closed < 1000)
  assert.equal(stateOf(b, a.peerId), undefined)
})

test("A's process frozen (SIGSTOP): B sees A gone within the TTL", async t => {
  const node = await start(t, { args: ["--ping-interval", "500ms"] }) // TTL 1.75 s
  const url = await newDoc(t, node)
  const b = await member(t, node, url, { cursor: "b" })
  const child = spawn(process.execPath, [fileURLToPath(new URL("peer.mjs", import.meta.url)), node.url, url, '{"cursor":"a"}'], {
    stdio: ["ignore", "pipe", "inherit"],
  })
  defer(t, () => { child.kill("SIGCONT"); child.kill("SIGKILL") })
  const [aPeer] = await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next().then(r => [r.value])
  await until("B sees the child", () => stateOf(b, aPeer))
  const frozen = Date.now()
  child.kill("SIGSTOP") // TCP stays up; nothing answers
  const bye = await until("B's goodbye for the frozen peer",
    () => b.events.find(e => e.type === "goodbye" && e.peerId === aPeer), 15000)
  const took = bye.at - frozen
  t.diagnostic(`frozen peer gone after ${took} ms (TTL 1750 ms)`)
  assert.ok(took < 1750 + 2000, `took ${took} ms`)
})

test("200 updates/s from A: B gets about one per tick, ending with A's last value", async t => {
  const node = await start(t)
  const url = await newDoc(t, node)
  const a = await member(t, node, url, { cursor: 0 })
  const b = await member(t, node, url, {})
  await until("B sees A", () => stateOf(b, a.peerId))
  const before = b.events.length
  const begun = Date.now()
  for (let i = 1; i <= 200; i++) {
    a.presence.broadcast("cursor", i)
    await new Promise(r => setTimeout(r, 5))
  }
  const elapsed = Date.now() - begun
  await until("B has the final value", () => stateOf(b, a.peerId)?.cursor === 200)
  const received = b.events.slice(before).filter(e => e.peerId === a.peerId && e.type !== "heartbeat")
  const values = received.map(e => e.type === "update" ? e.value : e.state.cursor).filter(v => v !== undefined)
  const ticks = Math.ceil(elapsed / 50) + 1
  t.diagnostic(`A sent 200 in ${elapsed} ms; B received ${values.length} (${ticks} ticks)`)
  assert.ok(values.length <= ticks + 2, `${values.length} updates for ${ticks} ticks`)
  for (let i = 1; i < values.length; i++) assert.ok(values[i] > values[i - 1], "never an older value")
  assert.equal(values.at(-1), 200)
})

test("typing clears 3 s after the last renewal", async t => {
  const node = await start(t)
  const url = await newDoc(t, node)
  const a = await member(t, node, url, {})
  const b = await member(t, node, url, {})
  await until("B sees A", () => stateOf(b, a.peerId))
  a.presence.broadcast("typing", true)
  await until("B sees A typing", () => stateOf(b, a.peerId)?.typing === true)
  const typed = Date.now()
  await until("typing cleared", () => stateOf(b, a.peerId)?.typing === false, 10000)
  const took = Date.now() - typed
  t.diagnostic(`typing cleared after ${took} ms`)
  assert.ok(took >= 2900 && took < 6000, `cleared after ${took} ms`)
})

test("a contact list sees a user go online, away and offline; REST agrees", async t => {
  const node = await start(t, { args: ["--away-after", "1s"] })
  const url = await newDoc(t, node)
  const { events: statuses, res } = await watchStatuses(t, node.http, ["ana", "nobody"])
  assert.equal(res.headers.get("content-type"), "text/event-stream")
  const ana = () => statuses.filter(s => s.userId === "ana").map(s => s.status)
  await until("initial statuses", () => statuses.length >= 2)
  assert.deepEqual(ana(), ["offline"])
  assert.ok(!statuses.some(s => s.userId !== "ana" && s.userId !== "nobody"), "only the watched users")

  const a = await member(t, node, url, { user: { id: "ana", name: "Ana" }, cursor: "c" })
  await until("ana online", () => ana().at(-1) === "online")
  const doc = await (await fetch(`${node.http}/api/docs/${url.slice("automerge:".length)}/presence`)).json()
  const peer = doc.peers.find(p => p.peerId === a.peerId)
  assert.equal(peer.userId, "ana")
  assert.equal(peer.name, "Ana")
  assert.equal(peer.cursor, "c")
  await until("ana away after 1 s idle", () => ana().at(-1) === "away", 10000)
  a.repo.close()
  await until("ana offline", () => ana().at(-1) === "offline")
  assert.deepEqual(ana(), ["offline", "online", "away", "offline"])
  const user = await (await fetch(`${node.http}/api/users/ana/presence`)).json()
  assert.equal(user.status, "offline")
  assert.ok(Date.parse(user.lastSeen) > 0, "last seen is recorded")
  assert.deepEqual(user.documents, [])
})
