// End-to-end: a receiver down for 30 s while a cluster of three nodes
// over a real Redis and PostgreSQL makes events and one of its nodes is
// killed and restarted gets every event once it is back, verified by
// svix, repeats only of the same webhook-id; the clients' edits and
// presence stay fast meanwhile. On its own in this file: it takes most
// of the runner's 120 s per file.
import { test } from "node:test"
import assert from "node:assert/strict"
import { randomBytes } from "node:crypto"
import { psql, start, until } from "./server.mjs"
import { cluster, heads, present, presenceTrip, receiver, repeats, roundTrip, run, sequences, tab, token, type, windowOpen } from "./hooks.mjs"

test("a receiver down for 30 s while a node is killed gets every event once it is back", async t => {
  const secret = "whsec_" + randomBytes(32).toString("base64")
  const hooks = await receiver(t, secret)
  // Down: its port closed, connections refused, for the 30 s the
  // scenario lasts. (webhook.test.mjs has an endpoint answering 503.)
  await hooks.close()
  const { args, nodes: [n1, n2, n3] } = await cluster(t, "k", [hooks.url], secret, ["--notify-window", "200ms", "--webhook-debounce", "2s"])
  const outageEnds = Date.now() + 30000
  const phases = []
  const phase = name => phases.push(`${name} ${((Date.now() - outageEnds + 30000) / 1000).toFixed(1)}`)
  const [ana, bo, cy] = ["ana", "bo", "cy"].map(n => `${n}-${run}-k`)

  phase("started")
  const tana = await tab(t, n1, ana)
  const docA = tana.handle.documentId
  const tbo = await tab(t, n2, bo, tana.handle.url)
  const tcy = await tab(t, n3, cy)
  const docB = tcy.handle.documentId
  await until("the three in their documents", () =>
    present(ana, docA) === 1 && present(bo, docA) === 1 && present(cy, docB) === 1, 20000)

  phase("present")
  const cyA = await tcy.repo.find(tana.handle.url) // cy edits docA too, from n3, without a presence there
  for (const ch of "abc") {
    type(tana.handle, `a${ch}`)
    type(tbo.handle, `b${ch}`)
    type(cyA, `c${ch}`)
  }
  await until("the edits everywhere", () => [tana.handle, tbo.handle, cyA].every(h => h.doc().text.length === 18), 10000)

  // cy edits both documents, from n3, once their windows so far closed:
  // only n3 notes these edits, and the windows they open are its alone.
  // The node is killed while they are open, before they close.
  await until("the windows so far closed", () => !windowOpen(docA) && !windowOpen(docB), 20000)
  type(cyA, "C")
  type(tcy.handle, "last words")
  const finalB = heads(tcy.handle)
  await until("cy's edits in their windows", () =>
    psql(`SELECT COUNT(*) FROM tandem_webhook_windows WHERE document IN ('${docA}', '${docB}')`) === "2", 10000)
  phase("cy edited")
  await n3.kill()
  await until("cy's client disconnected", () => tcy.repo.peers.length === 0, 10000)
  await until("the edits of n3 elsewhere", () => tbo.handle.doc().text.endsWith("C"), 10000)
  // While the endpoint is down (and its deliveries fail and wait) and a
  // node is dead, the clients' edits and presence go from node to node
  // as fast as ever.
  const edits = [], cursors = []
  for (let i = 0; i < 5; i++) {
    edits.push(await roundTrip(tana.handle, tbo.handle, `<${i}>`))
    cursors.push(await presenceTrip(tana, tbo, `c${i}`))
  }
  t.diagnostic(`during the outage: edit n1→n2 ${edits.map(Math.round).join(" ")} ms, cursor ${cursors.map(Math.round).join(" ")} ms`)
  assert.ok(Math.max(...edits) < 2000 && Math.max(...cursors) < 2000, `edits ${edits} ms, cursors ${cursors} ms`)

  phase("round trips")
  const posted = await fetch(`${n2.http}/api/notifications`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${token({ sub: "backend", notify: true })}` },
    body: JSON.stringify({ recipient: ana, kind: "reminder", actor: bo, document: docA }),
  })
  assert.equal(posted.status, 202)
  await tana.close()
  const finalA = heads(tbo.handle)
  await until("ana gone", () => present(ana, docA) === 0 && present(ana, "") === 0, 20000)

  // The cluster ends the dead node's presence, then it comes back under
  // the same node id and port; cy's client reconnects there by itself.
  await until("n3's presence ended", () => present(cy, docB) === 0, 30000)
  phase("n3 presence ended")
  await start(t, { args: [...args, "--node-id", `k3-${run}`], port: n3.port })
  // cy's client reconnects by itself; its Presence says where it is
  // with its next update (a cursor moved) or heartbeat.
  let moved = 0
  await until("cy back in docB", () => {
    if (tcy.repo.peers.length > 0 && Date.now() - moved > 1000) {
      moved = Date.now()
      tcy.presence.broadcast("cursor", `back ${moved}`)
    }
    return present(cy, docB) === 1
  }, 30000)
  phase("cy back")
  await tbo.close()
  await tcy.close()
  await until("everyone gone", () => [ana, bo, cy].every(u => present(u, "") === 0), 20000)
  phase("everyone gone")
  t.diagnostic(`the outage, s: ${phases.join(", ")}`)

  // The outage lasts 30 s, or until every event above was made if that
  // takes longer (a loaded machine): a length, not a wait for a condition.
  await new Promise(ok => setTimeout(ok, Math.max(0, outageEnds - Date.now())))
  await hooks.open()

  const stays = () => sequences(hooks, ["presence.entered", "presence.left"], e => `${e.data.userId} ${e.data.documentId}`)
  const statuses = () => sequences(hooks, ["user.status"], e => e.data.userId)
  const windows = d => hooks.ofType("document.changed").filter(e => e.data.documentId === d)
    .sort((x, y) => x.data.firstChangeAt - y.data.firstChangeAt)
  const got = () => {
    const seq = stays(), st = statuses()
    const types = k => (seq.get(k) ?? []).map(e => e.type.split(".")[1]).join(" ")
    return {
      created: hooks.ofType("document.created").map(e => e.data).sort((x, y) => x.documentId < y.documentId ? -1 : 1),
      // Retries come in any order: a document's latest window is the one
      // whose last change is latest.
      heads: [docA, docB].map(d => windows(d).at(-1)?.data.heads),
      presence: [types(`${ana} ${docA}`), types(`${bo} ${docA}`), types(`${cy} ${docB}`)],
      statuses: [ana, bo, cy].map(u => (st.get(u) ?? []).map(e => e.data.status).join(" ")),
      notifications: hooks.ofType("notification.created").map(e => [e.data.notification.recipient, e.data.notification.kind]),
    }
  }
  const expected = {
    created: [{ documentId: docA, users: [ana] }, { documentId: docB, users: [cy] }].sort((x, y) => x.documentId < y.documentId ? -1 : 1),
    heads: [finalA, finalB],
    // cy's stay in docB ends with its node and begins again when its
    // client reconnects to the node restarted.
    presence: ["entered left", "entered left", "entered left entered left"],
    statuses: ["online offline", "online offline", "online offline online offline"],
    notifications: [[ana, "reminder"]],
  }
  // A delivery the killed node was attempting is taken up again by River
  // once it has been running 30 s (looked for every 30 s), then waits its
  // backoff: up to a minute or so after the receiver is back.
  const back = Date.now()
  await until("every event delivered", () => hooks.waiting() === "0" && JSON.stringify(got()) === JSON.stringify(expected), 70000)
    .catch(err => {
      t.diagnostic(`got ${JSON.stringify(got())}`)
      t.diagnostic(`expected ${JSON.stringify(expected)}`)
      t.diagnostic(`deliveries not done: ${psql(`SELECT id, state, attempt, attempted_by[array_length(attempted_by, 1)], scheduled_at, args->>'type'
        FROM river_job WHERE queue LIKE 'tandem_webhook_%' AND state <> 'completed'`).replace(/\n/g, " ; ")}`)
      throw err
    })
  t.diagnostic(`every event ${Math.round((Date.now() - back) / 1000)} s after the receiver came back`)
  assert.deepEqual(got(), expected)
  // No event told twice under two ids: a document's windows never
  // overlap and name its editors, and every stay and status of this
  // test's users alternates (a stay in a document not asked about
  // included; the nodes of the test before, killed, leave events of its
  // users to the nodes here, as they should).
  for (const d of [docA, docB]) {
    const w = windows(d)
    for (let i = 1; i < w.length; i++) assert.ok(w[i].data.firstChangeAt > w[i - 1].data.lastChangeAt, JSON.stringify(w))
  }
  assert.deepEqual([...new Set(windows(docA).flatMap(e => e.data.users))].sort(), [ana, bo, cy].sort())
  assert.deepEqual([...new Set(windows(docB).flatMap(e => e.data.users))], [cy])
  for (const [k, l] of [...stays(), ...statuses()].filter(([k]) => k.split(" ")[0].endsWith(`-${run}-k`))) {
    const kinds = l.map(e => e.type === "user.status" ? (e.data.status === "offline" ? "out" : "in") : e.type.endsWith("entered") ? "in" : "out")
    assert.ok(kinds.every((x, i) => x === (i % 2 ? "out" : "in")), `${k}: ${JSON.stringify(l)}`)
  }
  const dup = repeats(hooks)
  t.diagnostic(`deliveries ${hooks.received.length}, events ${hooks.events.size}, repeated ids ${dup.length}: ${JSON.stringify(dup)}`)
  assert.equal(hooks.bad, 0, "every delivery verified")
})
