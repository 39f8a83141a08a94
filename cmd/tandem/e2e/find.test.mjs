// End-to-end: stock automerge-repo clients find what was just created, on
// one node and across nodes, with no sleep between create and find; a
// document that was never created is still reported unavailable within
// its bound; one that appears after doc-unavailable reaches the peer that
// asked for it.
import { test } from "node:test"
import assert from "node:assert/strict"
import { Repo } from "@automerge/automerge-repo"
import { WebSocketClientAdapter } from "@automerge/automerge-repo-network-websocket"
import { defer, start, startRedis, postgresURL } from "./server.mjs"
import { client, connected } from "./clients.mjs"

const grace = 200 // ms, tandem's default --unavailable-grace
// The bound a test allows for doc-unavailable: the grace window plus a
// generous margin for a shared, noisy machine. cmd/tandem-bench/RESULTS.md
// gives the figures measured on a quiet one.
const unavailableBound = grace + 3000

async function cluster(t, n) {
  const redis = await startRedis(t)
  const nodes = []
  for (let i = 0; i < n; i++) {
    nodes.push(await start(t, { args: ["--redis-url", redis.url, "--postgres-url", postgresURL, "--node-id", `find-n${i + 1}`] }))
  }
  return nodes
}

// createThenFind runs rounds of create on one client and find, in the
// same tick, on another; it returns the failures.
async function createThenFind(creator, finder, rounds) {
  const failures = []
  for (let i = 0; i < rounds; i++) {
    const h = creator.create({ text: `round ${i}` })
    try {
      const found = await finder.find(h.url)
      if (found.doc().text !== `round ${i}`) failures.push(`round ${i}: found ${JSON.stringify(found.doc())}`)
    } catch (e) {
      failures.push(`round ${i}: ${e.message}`)
    }
  }
  return failures
}

// threeInOneTick has three peers each create a document and, in the same
// tick, find the other two's.
async function threeInOneTick(peers, rounds) {
  const failures = []
  for (let i = 0; i < rounds; i++) {
    const handles = peers.map((p, k) => p.create({ by: k, round: i }))
    const finds = []
    peers.forEach((p, k) => handles.forEach((h, j) => {
      if (j !== k) finds.push(p.find(h.url).then(
        found => { if (found.doc().by !== j) failures.push(`round ${i}: peer ${k} found ${JSON.stringify(found.doc())}`) },
        e => failures.push(`round ${i}: peer ${k} finding peer ${j}'s: ${e.message}`)))
    }))
    await Promise.all(finds)
  }
  return failures
}

// offlineRepo makes documents without a network; connect() adds the
// server later, as a client that was offline and comes back.
function offlineRepo(t) {
  const repo = new Repo({ network: [] })
  defer(t, () => repo.shutdown())
  return {
    repo,
    connect(url) { repo.networkSubsystem.addNetworkAdapter(new WebSocketClientAdapter(url)) },
  }
}

test("create then find, 200 rounds on one node: never unavailable", async t => {
  const node = await start(t)
  const a = await connected(client(t, node.url))
  const b = await connected(client(t, node.url))
  assert.deepEqual(await createThenFind(a, b, 200), [])
})

test("three peers create and find each other's in the same tick, on one node", async t => {
  const node = await start(t)
  const peers = []
  for (let i = 0; i < 3; i++) peers.push(await connected(client(t, node.url)))
  assert.deepEqual(await threeInOneTick(peers, 50), [])
})

test("a never-created document is unavailable within the grace window and a margin, on one node", async t => {
  const node = await start(t)
  const b = await connected(client(t, node.url))
  const offline = offlineRepo(t).repo
  const took = []
  for (let i = 0; i < 5; i++) {
    const id = offline.create().documentId
    const started = Date.now()
    await assert.rejects(b.find(`automerge:${id}`), /unavailable/)
    took.push(Date.now() - started)
  }
  console.log(`doc-unavailable on one node after ${took.join(", ")} ms`)
  for (const ms of took) {
    assert.ok(ms >= grace - 5, `doc-unavailable after ${ms} ms, inside the ${grace} ms grace window`)
    assert.ok(ms < unavailableBound, `doc-unavailable after ${ms} ms`)
  }
})

test("a document created after doc-unavailable reaches the peer that asked, on one node", async t => {
  const node = await start(t)
  const b = await connected(client(t, node.url))
  const creator = offlineRepo(t)
  const h = creator.repo.create({ title: "made offline" })
  await assert.rejects(b.find(h.url), /unavailable/)
  const waiting = b.findWithProgress(h.url).handle
  creator.connect(node.url)
  await waiting.whenReady()
  assert.equal(waiting.doc().title, "made offline")
})

test("create then find across two nodes, 200 rounds: never unavailable", async t => {
  const nodes = await cluster(t, 2)
  const a = await connected(client(t, nodes[0].url))
  const b = await connected(client(t, nodes[1].url))
  assert.deepEqual(await createThenFind(a, b, 200), [])
})

test("three peers on three nodes create and find each other's in the same tick", async t => {
  const nodes = await cluster(t, 3)
  const peers = []
  for (const node of nodes) peers.push(await connected(client(t, node.url)))
  assert.deepEqual(await threeInOneTick(peers, 30), [])
})

test("across nodes: never-created is unavailable within its bound; created later reaches the asker", async t => {
  const nodes = await cluster(t, 2)
  const b = await connected(client(t, nodes[1].url))
  const offline = offlineRepo(t)
  const took = []
  for (let i = 0; i < 5; i++) {
    const id = offline.repo.create().documentId
    const started = Date.now()
    await assert.rejects(b.find(`automerge:${id}`), /unavailable/)
    took.push(Date.now() - started)
  }
  console.log(`doc-unavailable in a cluster after ${took.join(", ")} ms`)
  for (const ms of took) assert.ok(ms < unavailableBound, `doc-unavailable after ${ms} ms`)

  // Made offline, asked for on node 2, then brought to node 1.
  const h = offline.repo.create({ title: "arrived on node 1" })
  await assert.rejects(b.find(h.url), /unavailable/)
  const waiting = b.findWithProgress(h.url).handle
  offline.connect(nodes[0].url)
  await waiting.whenReady()
  assert.equal(waiting.doc().title, "arrived on node 1")
})
