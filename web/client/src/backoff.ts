/**
 * Reconnection delays: exponential backoff with full jitter, so that the
 * clients of a restarted server do not all come back in the same instant.
 */
export interface BackoffOptions {
  /** Delay ceiling for the first retry, in ms. Default 500. */
  baseMs?: number
  /** Largest delay ceiling, in ms. Default 30 000. */
  maxMs?: number
}

/**
 * Returns how long to wait before reconnection attempt number `attempt`
 * (0 for the first retry after a connection was lost): a uniformly random
 * delay between 0 and min(maxMs, baseMs·2^attempt). `random` is injectable
 * for tests.
 */
export function backoffDelay(
  attempt: number,
  { baseMs = 500, maxMs = 30_000 }: BackoffOptions = {},
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 30))
  return Math.floor(random() * ceiling)
}

/**
 * Returns `intervalMs` spread by ±`spread` (a fraction, 0.2 for ±20 %):
 * the period of a heartbeat that must not fall in step with other clients'.
 */
export function jittered(intervalMs: number, spread = 0.2, random: () => number = Math.random): number {
  return Math.round(intervalMs * (1 - spread + 2 * spread * random()))
}

/**
 * The reconnection timer of a connection that retries with backoff: at
 * most one attempt pending, delays that grow with each failed attempt,
 * and back to the base after {@link reset}. The socket and the
 * notification stream each keep one.
 */
export class RetrySchedule {
  #attempt = 0
  #timer: ReturnType<typeof setTimeout> | undefined
  readonly #options: BackoffOptions | undefined

  constructor(options?: BackoffOptions) {
    this.#options = options
  }

  /** Runs `attempt` after the next delay, in place of any attempt pending; returns the delay. */
  schedule(attempt: () => void): number {
    this.cancel()
    const delay = backoffDelay(this.#attempt++, this.#options)
    this.#timer = setTimeout(attempt, delay)
    return delay
  }

  /** Drops the pending attempt, if any. */
  cancel(): void {
    clearTimeout(this.#timer)
    this.#timer = undefined
  }

  /** Starts the delays over from the base: a connection lasted, or the user came back. */
  reset(): void {
    this.#attempt = 0
  }
}
