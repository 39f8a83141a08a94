/**
 * A newest-wins throttle: at most one send per interval. The first value
 * after a quiet interval goes out at once; values pushed while the interval
 * runs replace each other and only the newest is sent when it ends. An
 * older value is never sent after a newer one.
 */
export class Throttle<T> {
  #send: (value: T) => void
  #intervalMs: number
  #timer: ReturnType<typeof setTimeout> | undefined
  #pending: { value: T } | undefined

  /** `maxPerSecond` bounds the rate of `send` calls. */
  constructor(send: (value: T) => void, maxPerSecond: number) {
    if (!(maxPerSecond > 0)) throw new RangeError("maxPerSecond must be positive")
    this.#send = send
    this.#intervalMs = 1000 / maxPerSecond
  }

  /** Offers a value; it is sent now or at the end of the running interval. */
  push(value: T): void {
    if (this.#timer === undefined) {
      this.#send(value)
      this.#arm()
      return
    }
    this.#pending = { value }
  }

  /** Sends the pending value now, if there is one. */
  flush(): void {
    const p = this.#pending
    this.#pending = undefined
    if (p) this.#send(p.value)
  }

  /** Drops the pending value and stops the timer. */
  cancel(): void {
    this.#pending = undefined
    if (this.#timer !== undefined) clearTimeout(this.#timer)
    this.#timer = undefined
  }

  #arm(): void {
    this.#timer = setTimeout(() => {
      this.#timer = undefined
      if (this.#pending) {
        this.flush()
        this.#arm()
      }
    }, this.#intervalMs)
  }
}
