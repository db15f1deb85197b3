package accounts

import "context"

// Mail is a message the dashboard sends to one address: a subject, and the
// same words as plain text and as HTML. It holds nothing secret but the
// link it carries, and is never logged.
type Mail struct {
	To, Subject string
	Text, HTML  string
}

// Mailer sends mail; accounts/smtpmail sends it through an SMTP server.
// Send returns nil once the server has taken the message, even if the
// connection fails after; an error wrapping upscale.ErrUnavailable when
// the server did not take it but a later try may (unreachable, the
// connection reset or silent part way through, a temporary 4xx answer);
// and another error only when the server refused the message for good
// (a 5xx answer), which an Outbox does not try again.
type Mailer interface {
	Send(ctx context.Context, m Mail) error
}
