/**
 * The Tandem browser client: automerge-repo sync over a WebSocket that
 * detects dead connections and reconnects with backoff, and presence with
 * Automerge cursors, status and typing, and notifications over Server-Sent
 * Events. See web/client/README.md.
 */
export { connect, TandemClient, type ConnectOptions } from "./client.js"
export {
  TandemSocket,
  type SocketOptions,
  type ConnectionState,
  type CloseReason,
  type StateChange,
  type WebSocketConstructor,
} from "./socket.js"
export {
  TandemPresence,
  type PresenceOptions,
  type PresenceEvents,
  type PeerView,
  type UserView,
  type User,
  type Status,
  type CursorSelection,
  type TandemPresenceState,
} from "./presence.js"
export {
  TandemNotifications,
  NotificationsError,
  httpOrigin,
  type Notification,
  type NotificationActor,
  type NotificationPage,
  type NotificationsOptions,
  type NotificationsConfig,
  type NotificationsEvents,
  type NotificationsState,
  type ListOptions,
  type EventSourceLike,
  type EventSourceConstructor,
  type ServerSentEvent,
  type FetchFunction,
  type FetchResponse,
} from "./notifications.js"
export { spliceText, MAX_CHANGE_CHARS, type SpliceOptions } from "./text.js"
export { ActivityMonitor } from "./activity.js"
export { Throttle } from "./throttle.js"
export { backoffDelay, jittered, type BackoffOptions } from "./backoff.js"
