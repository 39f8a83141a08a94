// End-to-end: tandem nodes as separate processes on a real Redis Cluster
// (--redis-cluster; three masters, a replica each) and PostgreSQL, with
// stock automerge-repo clients.
import { test } from "node:test"
import { Presence } from "@automerge/automerge-repo"
import { defer, start, startRedisCluster, postgresURL, until } from "./server.mjs"
import { client, connected, typeTogether } from "./clients.mjs"

async function nodesOn(t, redis, n) {
  const nodes = []
  for (let i = 0; i < n; i++) {
    nodes.push(await start(t, { args: ["--redis-cluster", "--redis-url", redis.url, "--postgres-url", postgresURL, "--node-id", `rc${i + 1}`] }))
  }
  return nodes
}

async function present(t, repo, handle, state) {
  const presence = new Presence({ handle })
  presence.start({ initialState: state })
  defer(t, () => presence.running && presence.stop())
  return presence
}

const stateOf = (presence, peerId) => presence.getPeerStates().value[peerId]?.value

test("three nodes on a Redis Cluster: edits and presence cross nodes", async t => {
  const redis = await startRedisCluster(t)
  const nodes = await nodesOn(t, redis, 3)
  const repos = []
  for (const node of nodes) repos.push(await connected(client(t, node.url)))
  const first = repos[0].create({ text: "" })
  const handles = [first]
  for (const repo of repos.slice(1)) handles.push(await repo.find(first.url))
  await typeTogether(handles)
  const watchers = [await present(t, repos[1], handles[1], { user: { id: "bo" } }), await present(t, repos[2], handles[2], { user: { id: "cy" } })]
  const ana = await present(t, repos[0], handles[0], { user: { id: "ana" }, cursor: 1 })
  await until("ana's cursor on the other two nodes", () => watchers.every(w => stateOf(w, repos[0].peerId)?.cursor === 1), 10000)
})

test("a Redis Cluster master killed mid-edit: every edit reaches every node, presence flows again", async t => {
  const redis = await startRedisCluster(t)
  const nodes = await nodesOn(t, redis, 2)
  const a = await connected(client(t, nodes[0].url))
  const b = await connected(client(t, nodes[1].url))
  const ha = a.create({ items: [] })
  const hb = await b.find(ha.url)
  let n = 0
  const edit = () => { n++; ha.change(d => d.items.push(`a${n}`)); hb.change(d => d.items.push(`b${n}`)) }
  for (let i = 0; i < 5; i++) edit()
  await until("the first edits on both", () => hb.doc().items.length === 10 && ha.doc().items.length === 10, 10000)

  const typing = setInterval(edit, 50) // both type on while the document's shard fails over
  defer(t, () => clearInterval(typing))
  const killed = Date.now()
  await redis.killMasterOf(`tandem:doc:${ha.documentId}`)
  t.diagnostic(`a replica took over ${Date.now() - killed} ms after the kill`)
  await until("typing past the failover", () => n >= 60, 20000)
  clearInterval(typing)
  const want = 2 * n
  await until(`both have all ${want} items`, () => [ha, hb].every(h => h.doc().items.length === want), 30000)
  t.diagnostic(`${want} items on both nodes ${Date.now() - killed} ms after the kill`)

  const bo = await present(t, b, hb, { user: { id: "bo" } })
  await present(t, a, ha, { user: { id: "ana" }, cursor: 7 })
  await until("ana's cursor on node 2 after the failover", () => stateOf(bo, a.peerId)?.cursor === 7, 15000)
})
