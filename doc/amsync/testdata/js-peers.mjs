// Stock automerge (the JS package automerge-repo clients run) as the
// peers of a Go sync test. One JSON request per line on stdin, one JSON
// answer per line on stdout:
//   {"op":"peer","id":n,"base":[b64...],"edits":n} → {}: a new peer holding
//        the given changes, then edits of its own
//   {"op":"edit","id":n}              → {}: one edit
//   {"op":"gen","id":n}               → {"msg":b64|null}: its next sync message
//   {"op":"recv","id":n,"msg":b64}    → {}
//   {"op":"heads","id":n}             → {"heads":[hex...]}
import * as A from '@automerge/automerge'
import * as readline from 'node:readline'

const b64 = (u) => Buffer.from(u).toString('base64')
const unb64 = (s) => new Uint8Array(Buffer.from(s, 'base64'))

const peers = new Map()
let made = 0

function edit(doc) {
  made++
  return A.change(doc, (d) => { d['k' + (made % 20)] = made })
}

const rl = readline.createInterface({ input: process.stdin })
rl.on('line', (line) => {
  const req = JSON.parse(line)
  let res = {}
  try {
    switch (req.op) {
      case 'peer': {
        let doc = A.init()
        if (req.base.length > 0) [doc] = A.applyChanges(doc, req.base.map(unb64))
        for (let i = 0; i < req.edits; i++) doc = edit(doc)
        peers.set(req.id, { doc, state: A.initSyncState() })
        break
      }
      case 'edit': {
        const p = peers.get(req.id)
        p.doc = edit(p.doc)
        break
      }
      case 'gen': {
        const p = peers.get(req.id)
        const [state, msg] = A.generateSyncMessage(p.doc, p.state)
        p.state = state
        res = { msg: msg ? b64(msg) : null }
        break
      }
      case 'recv': {
        const p = peers.get(req.id)
        const [doc, state] = A.receiveSyncMessage(p.doc, p.state, unb64(req.msg))
        p.doc = doc
        p.state = state
        break
      }
      case 'heads':
        res = { heads: A.getHeads(peers.get(req.id).doc) }
        break
      default:
        throw new Error('unknown op ' + req.op)
    }
  } catch (e) {
    res = { err: String(e) }
  }
  process.stdout.write(JSON.stringify(res) + '\n')
})
