// The stock automerge a Go test measures the server's change checks
// against. Reads one JSON request per line on stdin, answers one JSON line
// on stdout:
//   {"op":"trace","seed":n,"steps":n}  → {"changes":[b64...]}: a random
//        editing session by several actors (text, marks, maps, lists,
//        counters, nested objects, deletions), every change in the order
//        it was made; each actor merges the others now and then.
//   {"op":"order","seed":n,"steps":n} → {"changes":[b64...],"cursors":[...]}:
//        the session of "trace", and the text's characters in order, each
//        as the op that inserted it ("<counter>@<actor hex>").
//   {"op":"cases"} → {"cases":{name:[b64...]}}: small sessions made to
//        reach what random ones rarely do (marks that never expand,
//        concurrent insertions by actors whose IDs prefix each other).
//   {"op":"save","changes":[b64...]} → {"doc":b64}: the document the
//        changes make, as automerge saves it.
//   {"op":"changes","doc":b64} → {"changes":[b64...]}: the changes
//        automerge gives for the document it loads (getAllChanges).
//   {"op":"load","changes":[b64...],"doc":b64} → {"ok":true} if automerge
//        loads doc as the document the changes make: the same heads, the
//        same changes, the same content, and after one more change by
//        each, the same again; else {"ok":false,"err"}.
//   {"op":"scalars"} → {"changes":[b64...]}: a document of every scalar
//        type but bytes (null, booleans, integers, floats, a date, a
//        counter, unicode text), some overwritten concurrently.
//   {"op":"view","changes":[b64...],"heads":[hex...]?} → {"json":s}: the
//        document the changes make (at heads, if given), as
//        JSON.stringify(toJS(doc)) writes it.
//   {"op":"edit","changes":[b64...],"edits":[...]} → {"json":s}: the
//        edits (as the REST API's PATCH takes them: put, delete, splice,
//        increment at a path) made with automerge's JS API in one change
//        on the changes' document, then JSON.stringify(toJS(doc)).
//   {"op":"apply","base":[b64...],"changes":[b64...]} → {"ok":true} if
//        automerge applies the changes on top of the base, materializes
//        the result, saves and loads it with the same heads, and a fresh
//        peer and a peer at the base both sync it; else {"ok":false,"err"}.
import * as A from '@automerge/automerge'
import * as readline from 'node:readline'

const b64 = (u) => Buffer.from(u).toString('base64')
const unb64 = (s) => new Uint8Array(Buffer.from(s, 'base64'))

function rng(seed) {
  let x = seed >>> 0 || 1
  return () => {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0
    return x / 4294967296
  }
}

function trace(seed, steps) {
  const r = rng(seed)
  const pick = (n) => Math.floor(r() * n)
  let base = A.change(A.init(), (d) => {
    d.text = 'hello world'
    d.m = { a: 1, b: 'x' }
    d.l = [1, 2, 3]
    d.c = new A.Counter(0)
  })
  const actors = [base]
  for (let i = 0; i < 3; i++) actors.push(A.clone(base))
  for (let s = 0; s < steps; s++) {
    const i = pick(actors.length)
    let d = actors[i]
    if (r() < 0.2) {
      const j = pick(actors.length)
      if (j !== i) d = A.merge(d, A.clone(actors[j]))
    }
    d = A.change(d, (x) => {
      const len = x.text.length
      switch (pick(12)) {
        case 0: case 1: case 2:
          A.splice(x, ['text'], pick(len + 1), 0, 'abcdefgh'.slice(0, 1 + pick(8)))
          break
        case 3:
          if (len > 0) A.splice(x, ['text'], pick(len), 1 + pick(3))
          break
        case 4:
          if (len > 1) {
            const a = pick(len - 1)
            A.mark(x, ['text'], { start: a, end: a + 1 + pick(len - a - 1), expand: ['before', 'after', 'both', 'none'][pick(4)] }, ['bold', 'italic', 'link'][pick(3)], pick(2) ? true : 'v' + pick(9))
          }
          break
        case 5:
          if (len > 1) {
            const a = pick(len - 1)
            A.unmark(x, ['text'], { start: a, end: a + 1, expand: 'none' }, ['bold', 'italic', 'link'][pick(3)])
          }
          break
        case 6:
          x.c.increment(1 + pick(5))
          break
        case 7:
          x.m['k' + pick(5)] = pick(2) ? pick(100) : { n: pick(9), t: 'y' }
          break
        case 8:
          if (Object.keys(x.m).length > 0) delete x.m[Object.keys(x.m)[pick(Object.keys(x.m).length)]]
          break
        case 9:
          if (x.l.length > 0 && pick(2)) x.l.splice(pick(x.l.length), 1)
          else x.l.splice(pick(x.l.length + 1), 0, pick(2) ? pick(9) : [pick(9)])
          break
        case 10:
          if (x.l.length > 0) x.l[pick(x.l.length)] = pick(50)
          break
        case 11:
          x.m.cnt = new A.Counter(pick(3))
          if (pick(2)) x.m.cnt.increment(2)
          break
      }
    })
    actors[i] = d
  }
  let all = actors[0]
  for (const d of actors.slice(1)) all = A.merge(all, A.clone(d))
  return A.getAllChanges(all)
}

function apply(base, changes) {
  let d = A.init()
  try {
    ;[d] = A.applyChanges(d, base)
  } catch (e) {
    return { ok: false, err: 'base: ' + e.message }
  }
  const at = A.clone(d)
  try {
    ;[d] = A.applyChanges(d, changes)
    A.toJS(d)
    const want = A.getHeads(d).slice().sort().join()
    const loaded = A.load(A.save(d))
    A.toJS(loaded)
    if (A.getHeads(loaded).slice().sort().join() !== want) return { ok: false, err: 'heads differ after save and load' }
    for (let peer of [A.init(), at]) {
      let s1 = A.initSyncState(), s2 = A.initSyncState()
      for (let round = 0; round < 40; round++) {
        let m1, m2
        ;[s1, m1] = A.generateSyncMessage(d, s1)
        if (m1) [peer, s2] = A.receiveSyncMessage(peer, s2, m1)
        ;[s2, m2] = A.generateSyncMessage(peer, s2)
        if (m2) [d, s1] = A.receiveSyncMessage(d, s1, m2)
        if (!m1 && !m2) break
      }
      A.toJS(peer)
      if (A.getHeads(peer).slice().sort().join() !== want) return { ok: false, err: 'a peer did not sync to the same heads' }
    }
  } catch (e) {
    return { ok: false, err: String(e && e.message || e) }
  }
  return { ok: true }
}

function cases() {
  const out = {}
  let d = A.change(A.init({ actor: '0a' }), (x) => { x.t = 'one two three' })
  d = A.change(d, (x) => { A.mark(x, ['t'], { start: 0, end: 3, expand: 'none' }, 'em', true) })
  out.markNeverExpands = A.getAllChanges(d)
  d = A.change(d, (x) => { A.splice(x, ['t'], 0, 8, '') })
  out.markedTextDeleted = A.getAllChanges(d)
  const base = A.change(A.init({ actor: '5c' }), (x) => { x.l = []; x.t = ''; x.m = {} })
  let all = null
  for (const [i, id] of ['5c', '5c00', '5c0000', '5d', '5bff'].entries()) {
    const e = A.change(A.clone(base, { actor: id }), (x) => {
      x.l.insertAt(0, i); A.splice(x, ['t'], 0, 0, 'x' + i); x.m.k = i
    })
    all = all ? A.merge(all, e) : e
  }
  all = A.change(all, (x) => { x.l.insertAt(2, { n: [1, { deep: 'y' }] }); x.l[0] = 'over'; x.l.deleteAt(1) })
  out.prefixActors = A.getAllChanges(all)
  let c = A.change(A.init({ actor: '7e' }), (x) => { x.l = [new A.Counter(1)]; x.c = new A.Counter(0) })
  c = A.change(c, (x) => { x.l[0].increment(3); x.c.increment(-2) })
  c = A.change(c, (x) => { delete x.c; x.l.deleteAt(0) })
  out.countersDeleted = A.getAllChanges(c)
  let b = A.change(A.init({ actor: '3b' }), (x) => { x.text = 'hello world' })
  b = A.change(b, (x) => { A.splitBlock(x, ['text'], 5, { type: 'paragraph', parents: [], attrs: {} }) })
  b = A.change(b, (x) => { A.mark(x, ['text'], { start: 0, end: 3, expand: 'after' }, 'bold', true) })
  out.textWithBlock = A.getAllChanges(b)
  out.emptyChange = A.getAllChanges(A.emptyChange(A.change(A.init({ actor: '01' }), (x) => { x.a = 1 }), 'nothing'))
  return out
}

function loadAs(changes, doc) {
  try {
    const [want] = A.applyChanges(A.init(), changes)
    const got = A.load(doc)
    const heads = (d) => A.getHeads(d).slice().sort().join()
    if (heads(got) !== heads(want)) return { ok: false, err: `heads ${heads(got)}, want ${heads(want)}` }
    const hashes = (d) => A.getAllChanges(d).map((c) => A.decodeChange(c).hash).sort().join()
    if (hashes(got) !== hashes(want)) return { ok: false, err: 'the changes differ' }
    const gotJS = JSON.stringify(A.toJS(got)), wantJS = JSON.stringify(A.toJS(want))
    if (gotJS !== wantJS) return { ok: false, err: `content ${gotJS.slice(0, 300)}, want ${wantJS.slice(0, 300)}` }
    const edit = (d) => A.change(A.clone(d, { actor: 'ab'.repeat(16) }), { time: 0 }, (x) => { x.__probe = 1 })
    const [g2, w2] = [edit(got), edit(want)]
    if (heads(g2) !== heads(w2)) return { ok: false, err: 'a change made on it differs from one made on the changes' }
  } catch (e) {
    return { ok: false, err: String(e && e.message || e) }
  }
  return { ok: true }
}

const rl = readline.createInterface({ input: process.stdin })
rl.on('line', (line) => {
  const req = JSON.parse(line)
  let res
  if (req.op === 'trace') res = { changes: trace(req.seed, req.steps).map(b64) }
  else if (req.op === 'order') {
    const changes = trace(req.seed, req.steps)
    const [d] = A.applyChanges(A.init(), changes)
    const cursors = []
    for (let i = 0; i < d.text.length; i++) cursors.push(A.getCursor(d, ['text'], i))
    res = { changes: changes.map(b64), cursors }
  }
  else if (req.op === 'cases') res = { cases: Object.fromEntries(Object.entries(cases()).map(([k, v]) => [k, v.map(b64)])) }
  else if (req.op === 'save') res = { doc: b64(A.save(A.applyChanges(A.init(), req.changes.map(unb64))[0])) }
  else if (req.op === 'changes') res = { changes: A.getAllChanges(A.load(unb64(req.doc))).map(b64) }
  else if (req.op === 'scalars') {
    let d = A.change(A.init({ actor: '01' }), (x) => {
      x.s = { n: null, t: true, f: false, fl: 1.5, neg: -3, big: 2 ** 40, d: new Date(1700000000123), c: new A.Counter(5) }
      x.u = 'héllo 👋 wörld'
      x.l = [new Date(0), -0.25, 'x']
    })
    let e = A.change(A.clone(d, { actor: '02' }), (x) => { x.s.t = 'two'; x.s.c.increment(3); A.splice(x, ['u'], 7, 1, '🌍') })
    d = A.change(d, (x) => { x.s.t = 'one'; x.s.c.increment(-1); delete x.s.neg })
    res = { changes: A.getAllChanges(A.merge(d, e)).map(b64) }
  }
  else if (req.op === 'edit') {
    let [d] = A.applyChanges(A.init(), req.changes.map(unb64))
    try {
      d = A.change(d, (x) => {
        for (const e of req.edits) {
          const parent = e.path.slice(0, -1).reduce((o, k) => o[k], x)
          const last = e.path[e.path.length - 1]
          if (e.op === 'splice') {
            const target = e.path.reduce((o, k) => o[k], x)
            if (typeof target === 'string') A.splice(x, e.path, e.index, e.delete || 0, e.insert || '')
            else target.splice(e.index, e.delete || 0, ...(e.insert || []))
          } else if (e.op === 'put') parent[last] = e.value
          else if (e.op === 'delete') { if (Array.isArray(parent)) parent.splice(last, 1); else delete parent[last] }
          else if (e.op === 'increment') parent[last].increment(e.value ?? 1)
        }
      })
      res = { json: JSON.stringify(A.toJS(d)) }
    } catch (err) {
      res = { err: String(err && err.message || err) }
    }
  }
  else if (req.op === 'view') {
    let [d] = A.applyChanges(A.init(), req.changes.map(unb64))
    if (req.heads) d = A.view(d, req.heads)
    res = { json: JSON.stringify(A.toJS(d)) }
  }
  else if (req.op === 'load') res = loadAs(req.changes.map(unb64), unb64(req.doc))
  else res = apply(req.base.map(unb64), req.changes.map(unb64))
  process.stdout.write(JSON.stringify(res) + '\n')
})
