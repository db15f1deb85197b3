package dashboard

import "context"

// Mail is a message the dashboard sends to one address: a subject, and the
// same words as plain text and as HTML. It holds nothing secret but the
// link it carries, and is never logged.
type Mail struct {
	To, Subject string
	Text, HTML  string
}

// Mailer sends mail; dashboard/smtpmail sends it through an SMTP server.
// Send returns an error wrapping upscale.ErrUnavailable when the server
// cannot take the message for now (unreachable, or a temporary 4xx
// answer), which a later try may cure, and another error when it refused
// the message for good.
type Mailer interface {
	Send(ctx context.Context, m Mail) error
}
