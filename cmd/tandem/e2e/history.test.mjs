// End-to-end: presence history, recorded by real nodes from stock
// automerge-repo clients' presence and read back over the HTTP API: on
// one node with its embedded store, across a cluster's nodes in
// PostgreSQL, and through a node's SIGKILL.
import { test } from "node:test"
import assert from "node:assert/strict"
import { Presence } from "@automerge/automerge-repo"
import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { defer, start, startRedis, postgresURL, until, tempDir } from "./server.mjs"
import { client, connected } from "./clients.mjs"

// history reads a document's presence history from a node.
async function history(node, docId, query = "") {
  const res = await fetch(`${node.http}/api/docs/${docId}/presence/history${query}`)
  assert.equal(res.status, 200, await res.clone().text())
  return (await res.json()).intervals
}

const of = (intervals, user) => intervals.filter(iv => iv.user === user)

// join starts a stock client's presence in a document on a node.
async function join(t, node, docUrl, state) {
  const repo = await connected(client(t, node.url))
  const handle = await repo.find(docUrl)
  const presence = new Presence({ handle })
  presence.start({ initialState: state })
  defer(t, () => presence.running && presence.stop())
  return { repo, presence }
}

// joinInProcess runs a stock client with presence in a process of its own,
// for tests that kill its node: it would reconnect for ever.
async function joinInProcess(t, node, docUrl, state) {
  const child = spawn(process.execPath, [fileURLToPath(new URL("peer.mjs", import.meta.url)), node.url, docUrl, JSON.stringify(state)], {
    stdio: ["ignore", "pipe", "inherit"],
  })
  defer(t, () => child.kill("SIGKILL"))
  await createInterface({ input: child.stdout })[Symbol.asyncIterator]().next()
  return child
}

test("one node records who was in a document, with names, and ends it when they leave", async t => {
  const node = await start(t)
  const owner = await connected(client(t, node.url))
  const handle = owner.create({})
  const before = Date.now()
  const ana = await join(t, node, handle.url, { user: { id: "ana", name: "Ana" } })
  const open = await until("Ana's open interval", async () => {
    const ivs = of(await history(node, handle.documentId), "ana")
    return ivs.length === 1 && ivs[0].to === null && ivs
  })
  assert.equal(open[0].name, "Ana")
  assert.equal(open[0].status, "online")
  assert.ok(Date.parse(open[0].from) >= before - 1000, `from ${open[0].from} is before she came`)

  ana.presence.stop() // a goodbye
  const left = Date.now()
  const ended = await until("Ana's interval ended", async () => {
    const ivs = of(await history(node, handle.documentId), "ana")
    return ivs.length === 1 && ivs[0].to !== null && ivs
  })
  const to = Date.parse(ended[0].to)
  assert.ok(to <= Date.now() && to >= left - 1000, `ended at ${ended[0].to}, she left at ${new Date(left).toISOString()}`)

  const res = await fetch(`${node.http}/api/docs/${handle.documentId}/presence/hourly`)
  const hours = (await res.json()).hours
  assert.equal(hours.at(-1).users, 1, JSON.stringify(hours.at(-1)))
  // Her tab is still connected: she is online, in no document.
  const user = await (await fetch(`${node.http}/api/users/ana/presence/history`)).json()
  assert.ok(user.intervals.length === 1 && user.intervals[0].status === "online" && user.intervals[0].to === null, JSON.stringify(user))
  assert.equal(user.intervals[0].name, "Ana")
})

test("after a SIGKILL the restarted node ends the dead run's intervals at its last beat", async t => {
  const dataDir = tempDir(t)
  let node = await start(t, { dataDir })
  const owner = await connected(client(t, node.url))
  const handle = owner.create({})
  const docId = handle.documentId
  const ana = await joinInProcess(t, node, handle.url, { user: { id: "ana" } })
  await until("Ana's open interval", async () => of(await history(node, docId), "ana").some(iv => iv.to === null))
  owner.close()
  const killed = Date.now()
  await node.kill("SIGKILL")
  const dead = Date.now()
  // Her client would reconnect to a node that came back on its port.
  ana.kill("SIGKILL")
  node = await start(t, { dataDir })
  const ivs = await until("Ana's interval ended", async () => {
    const list = of(await history(node, docId), "ana")
    return list.length > 0 && list.every(iv => iv.to !== null) && list
  })
  const to = Date.parse(ivs.at(-1).to)
  // Beats come every 2 s, and one before each write: the end is the last
  // before the node died, kept rounded up to the millisecond.
  assert.ok(to <= dead + 1 && to >= killed - 3000, `ended at ${ivs.at(-1).to}, killed at ${new Date(killed).toISOString()}, dead by ${new Date(dead).toISOString()}`)
})

async function cluster(t, n, redis) {
  const nodes = []
  for (let i = 0; i < n; i++) {
    nodes.push(await start(t, { args: ["--redis-url", redis.url, "--postgres-url", postgresURL, "--node-id", `h${i + 1}-${Date.now()}`] }))
  }
  return nodes
}

test("a user who moves to another node is one interval, and a killed node's users end at its death", async t => {
  const redis = await startRedis(t)
  const nodes = await cluster(t, 2, redis)
  const owner = await connected(client(t, nodes[1].url))
  const handle = owner.create({})
  const docId = handle.documentId

  // Ana on node 1, then on node 2: her tab reconnects elsewhere.
  const first = await join(t, nodes[0], handle.url, { user: { id: "ana" } })
  await until("Ana on node 1", async () => of(await history(nodes[1], docId), "ana").length === 1)
  first.presence.stop()
  await first.repo.close()
  await join(t, nodes[1], handle.url, { user: { id: "ana" } })
  await until("Ana's first node ended its interval and her second opened one", async () => {
    const raw = await (await fetch(`${nodes[0].http}/api/docs/${docId}/presence/history`)).json()
    const ana = of(raw.intervals, "ana")
    return ana.length === 1 && ana[0].to === null
  })

  // Bo on node 1, in a process of his own; node 1 dies.
  await joinInProcess(t, nodes[0], handle.url, { user: { id: "bo" } })
  await until("Bo's open interval", async () => of(await history(nodes[1], docId), "bo").some(iv => iv.to === null))
  const killed = Date.now()
  await nodes[0].kill("SIGKILL")
  const dead = Date.now()
  const bo = await until("Bo's interval ended by the surviving node", async () => {
    const list = of(await history(nodes[1], docId), "bo")
    return list.length > 0 && list.every(iv => iv.to !== null) && list
  }, 20000)
  const to = Date.parse(bo.at(-1).to)
  // At the dead node's last beat, kept rounded up to the millisecond.
  assert.ok(to <= dead + 1 && to >= killed - 3000, `Bo's interval ended at ${bo.at(-1).to}, his node was killed at ${new Date(killed).toISOString()}, dead by ${new Date(dead).toISOString()}`)
  const ana = of(await history(nodes[1], docId), "ana")
  assert.equal(ana.length, 1, JSON.stringify(ana))
  assert.equal(ana[0].to, null)
})
