// End-to-end: three tandem nodes as separate processes share documents and
// presence over a real Redis and PostgreSQL.
import { test } from "node:test"
import assert from "node:assert/strict"
import { Presence } from "@automerge/automerge-repo"
import { execFileSync, spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { defer, start, startRedis, postgresURL, until } from "./server.mjs"
import { client, connected, typeTogether, watchStatuses } from "./clients.mjs"

async function cluster(t, n, redis, extra = []) {
  const nodes = []
  for (let i = 0; i < n; i++) {
    nodes.push(await start(t, { args: ["--redis-url", redis.url, "--postgres-url", postgresURL, "--node-id", `n${i + 1}`, ...extra] }))
  }
  return nodes
}

async function member(t, url, docUrl, state) {
  const repo = await connected(client(t, url))
  const handle = await repo.find(docUrl)
  const presence = new Presence({ handle })
  const events = []
  for (const type of ["update", "snapshot", "goodbye"]) presence.on(type, e => events.push({ ...e, type, at: Date.now() }))
  presence.start({ initialState: state })
  defer(t, () => presence.running && presence.stop())
  return { repo, handle, presence, events, peerId: repo.peerId }
}

const stateOf = (m, peerId) => m.presence.getPeerStates().value[peerId]?.value

// anaOnNode1BoOnNode2 puts Bo, a member of a document, on node 2 and Ana
// on node 1, and waits until Bo sees Ana. Ana runs in a process of her
// own: once her node is gone a client would keep reconnecting for ever,
// and the process dies with the test.
async function anaOnNode1BoOnNode2(t, nodes) {
  const owner = await connected(client(t, nodes[1].url))
  const doc = owner.create({})
  const probe = await connected(client(t, nodes[0].url))
  await probe.find(doc.url) // node 1 has the document
  probe.close() // no client of ours may outlive node 1: it would reconnect for ever
  const b = await member(t, nodes[1].url, doc.url, { user: { id: "bo" } })
  const child = spawn(process.execPath, [fileURLToPath(new URL("peer.mjs", import.meta.url)), nodes[0].url, doc.url, '{"user":{"id":"ana"}}'], {
    stdio: ["ignore", "pipe", "inherit"],
  })
  defer(t, () => child.kill("SIGKILL"))
  const aPeer = (await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next()).value
  await until("B sees A across nodes", () => stateOf(b, aPeer), 10000)
  return { b, aPeer }
}


test("clients on three nodes edit one document concurrently and converge", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 3, redis)
  const a = await connected(client(t, nodes[0].url))
  const ha = a.create({ text: "" })
  const others = []
  for (const node of nodes.slice(1)) {
    const repo = await connected(client(t, node.url))
    others.push(await repo.find(ha.url))
  }
  const handles = [ha, ...others]
  await typeTogether(handles)
})

test("an application's ephemeral message reaches a peer on another node, and never its sender", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis)
  const a = await connected(client(t, nodes[0].url))
  const ha = a.create({})
  const hb = await (await connected(client(t, nodes[1].url))).find(ha.url)
  const atA = [], atB = []
  ha.on("ephemeral-message", e => atA.push(e.message))
  hb.on("ephemeral-message", e => atB.push(e.message))
  // B's node may not have subscribed to the document's channel yet when A
  // first speaks: A repeats until B hears, as an application's own
  // keep-alive would.
  await until("B on node 2 receives A's message", () => {
    if (atB.length === 0) ha.broadcast({ hello: "from A" })
    return atB.length > 0
  }, 10000)
  assert.deepEqual(atB[0], { hello: "from A" })
  hb.broadcast({ hello: "from B" })
  await until("A on node 1 receives B's answer", () => atA.length > 0)
  assert.ok(atA.every(m => m.hello === "from B"), "A never hears itself")
})

test("presence and status cross nodes; the added latency is measured", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis)
  const owner = await connected(client(t, nodes[0].url))
  const doc = owner.create({})
  await (await connected(client(t, nodes[1].url))).find(doc.url)
  const a = await member(t, nodes[0].url, doc.url, { user: { id: "ana" }, cursor: 0 })
  const near = await member(t, nodes[0].url, doc.url, { user: { id: "bo" } })
  const far = await member(t, nodes[1].url, doc.url, { user: { id: "cy" } })
  await until("both see A", () => stateOf(near, a.peerId) && stateOf(far, a.peerId), 10000)
  assert.equal(stateOf(far, a.peerId).status, "online")
  const lat = { near: [], far: [] }
  for (let i = 1; i <= 60; i++) {
    const sent = Date.now()
    a.presence.broadcast("cursor", i)
    await until(`cursor ${i} on both nodes`, () => stateOf(near, a.peerId)?.cursor === i && stateOf(far, a.peerId)?.cursor === i)
    lat.near.push(near.events.findLast(e => e.peerId === a.peerId).at - sent)
    lat.far.push(far.events.findLast(e => e.peerId === a.peerId).at - sent)
    await new Promise(r => setTimeout(r, 60)) // one update per tick: none coalesced
  }
  const p99 = xs => xs.toSorted((x, y) => x - y)[Math.ceil(xs.length * 0.99) - 1]
  t.diagnostic(`cursor latency p99: same node ${p99(lat.near)} ms, other node ${p99(lat.far)} ms (added ${p99(lat.far) - p99(lat.near)} ms)`)
})

test("a node killed with SIGKILL: its users disappear from the other nodes within the node TTL", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis, ["--node-ttl", "2s"])
  const { b, aPeer } = await anaOnNode1BoOnNode2(t, nodes)
  const killed = Date.now()
  await nodes[0].kill("SIGKILL")
  const bye = await until("B's goodbye for A", () => b.events.find(e => e.type === "goodbye" && e.peerId === aPeer), 15000)
  t.diagnostic(`A gone on node 2 ${bye.at - killed} ms after node 1 died (node TTL 2000 ms)`)
  assert.ok(bye.at - killed < 2000 + 2000, `took ${bye.at - killed} ms`)
  const user = await (await fetch(`${nodes[1].http}/api/users/ana/presence`)).json()
  assert.equal(user.status, "offline")
})

test("a node stopped with SIGTERM: its users are gone from the other nodes at once, not after the node TTL", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis, ["--node-ttl", "30s"])
  const { b, aPeer } = await anaOnNode1BoOnNode2(t, nodes)
  const stopped = Date.now()
  await nodes[0].kill("SIGTERM")
  const exitedIn = Date.now() - stopped
  const bye = await until("B's goodbye for A", () => b.events.find(e => e.type === "goodbye" && e.peerId === aPeer), 15000)
  t.diagnostic(`A gone on node 2 ${bye.at - stopped} ms after SIGTERM to node 1 (it exited in ${exitedIn} ms; node TTL 30 s)`)
  assert.equal(nodes[0].proc.exitCode, 0, "node 1 stopped cleanly")
  assert.ok(bye.at - stopped < 2000, `took ${bye.at - stopped} ms`)
  // The node said so itself: its bye reached node 2 and its key is gone.
  await until("node 2 hearing node 1's bye", () => nodes[1].logs.some(l => l.includes('"msg":"bus: a node said goodbye"') && l.includes('"node":"n1"')), 2000)
  const key = execFileSync("redis-cli", ["-p", String(redis.port), "EXISTS", "tandem:node:n1"]).toString().trim()
  assert.equal(key, "0", "node 1's key is deleted")
  await until("ana offline on node 2", async () => {
    const user = await (await fetch(`${nodes[1].http}/api/users/ana/presence`)).json()
    return user.status === "offline"
  }, 2000)
})

test("Redis stopped and restarted in the middle of editing: all converge, nothing lost", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis)
  const a = await connected(client(t, nodes[0].url))
  const ha = a.create({ items: [] })
  const b = await connected(client(t, nodes[1].url))
  const hb = await b.find(ha.url)
  let n = 0
  const edit = () => { n++; ha.change(d => d.items.push(`a${n}`)); hb.change(d => d.items.push(`b${n}`)) }
  for (let i = 0; i < 5; i++) edit()
  await redis.stop()
  for (let i = 0; i < 5; i++) edit() // each node serves its own clients meanwhile
  await until("node 1's client still edits", () => ha.doc().items.includes("a10"))
  await startRedis(t, redis.port)
  for (let i = 0; i < 5; i++) edit()
  const want = new Set([...Array(15).keys()].flatMap(i => [`a${i + 1}`, `b${i + 1}`]))
  await until("both have all 30 items", () =>
    [ha, hb].every(h => h.doc().items.length === 30 && h.doc().items.every(x => want.has(x))), 30000)
})

test("a node restarted while the others run catches up", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis)
  const a = await connected(client(t, nodes[0].url))
  const ha = a.create({ log: [] })
  ha.change(d => d.log.push("before"))
  await nodes[1].kill("SIGKILL")
  for (let i = 0; i < 5; i++) ha.change(d => d.log.push(`while down ${i}`))
  const again = await start(t, { port: nodes[1].port, args: nodes[1].args })
  const b = await connected(client(t, again.url))
  const hb = await b.find(ha.url)
  await until("the restarted node has every edit", () => hb.doc().log.length === 6, 20000)
  hb.change(d => d.log.push("from the restarted node"))
  await until("node 1 gets it", () => ha.doc().log.includes("from the restarted node"), 20000)
})

test("a contact list on one node follows a user connected to another", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis)
  const { events } = await watchStatuses(t, nodes[1].http, ["ana"])
  const statuses = () => events.map(e => e.status)
  await until("the initial status", () => events.length === 1)
  const owner = await connected(client(t, nodes[0].url))
  const doc = owner.create({})
  const a = await member(t, nodes[0].url, doc.url, { user: { id: "ana" } })
  await until("ana online, seen from node 2", () => statuses().at(-1) === "online", 10000)
  a.repo.close()
  await until("ana offline, seen from node 2", () => statuses().at(-1) === "offline", 10000)
  assert.deepEqual(statuses(), ["offline", "online", "offline"])
})

test("any node's REST API tells the status of a user connected elsewhere", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis)
  const owner = await connected(client(t, nodes[0].url))
  const doc = owner.create({})
  const a = await member(t, nodes[0].url, doc.url, { user: { id: "ana" } })
  const status = async () => (await (await fetch(`${nodes[1].http}/api/users/ana/presence`)).json()).status
  await until("node 2 says ana is online", async () => await status() === "online", 10000)
  a.repo.close()
  await until("node 2 says ana is offline", async () => await status() === "offline", 10000)
})
