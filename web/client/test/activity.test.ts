import { test, mock } from "node:test"
import assert from "node:assert/strict"
import { ActivityMonitor, type Visibility } from "../src/activity.js"

class FakeTarget {
  listeners = new Map<string, Set<() => void>>()
  hidden = false
  addEventListener(type: string, l: () => void) {
    if (!this.listeners.has(type)) this.listeners.set(type, new Set())
    this.listeners.get(type)!.add(l)
  }
  removeEventListener(type: string, l: () => void) {
    this.listeners.get(type)?.delete(l)
  }
  fire(type: string) {
    this.listeners.get(type)?.forEach(l => l())
  }
}

test("idle turns away, input turns online, a hidden page is away at once", t => {
  mock.timers.enable({ apis: ["setTimeout", "Date"] })
  t.after(() => mock.timers.reset())
  const win = new FakeTarget()
  const doc = new FakeTarget() as FakeTarget & Visibility
  const seen: string[] = []
  const m = new ActivityMonitor({ idleMs: 1000, target: win, visibility: doc, onChange: s => seen.push(s) })
  mock.timers.tick(600)
  win.fire("keydown") // resets the idle clock
  mock.timers.tick(600)
  assert.deepEqual(seen, [])
  mock.timers.tick(400)
  assert.deepEqual(seen, ["away"])
  win.fire("pointermove")
  assert.deepEqual(seen, ["away", "online"])
  doc.hidden = true
  doc.fire("visibilitychange")
  assert.deepEqual(seen, ["away", "online", "away"])
  win.fire("pointermove") // input while hidden (rare) does not count
  assert.equal(m.status, "away")
  doc.hidden = false
  doc.fire("visibilitychange")
  assert.deepEqual(seen, ["away", "online", "away", "online"])
  m.stop()
  assert.equal([...win.listeners.values()].reduce((n, s) => n + s.size, 0), 0)
})
