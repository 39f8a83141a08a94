package webhook

import "errors"

var (
	// ErrConfig wraps every reason New refuses a Config.
	ErrConfig = errors.New("webhook: bad configuration")
	// ErrEndpointGone is a delivery's error when its endpoint is no
	// longer configured: the delivery is cancelled.
	ErrEndpointGone = errors.New("webhook: endpoint no longer configured")
	// ErrRejected is a delivery's error when the endpoint answered with a
	// status other than 2xx.
	ErrRejected = errors.New("webhook: endpoint did not accept the event")
	// ErrExpired is the error of a delivery given up after RetryFor.
	ErrExpired = errors.New("webhook: delivery given up")
)
