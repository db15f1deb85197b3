// Package accounts holds what a server needs to let people open and use
// accounts themselves, below any user interface: the directory of the
// accounts opened by email and their share codes (Directory), the mail
// that carries sign-in links (Mail, Mailer, Outbox), the stores that make
// sign-in links work once and sign-outs hold on every replica (LinkStore,
// SessionStore), and the share bonus that pays for accounts a share link
// brought (ShareBonus). Each interface has an in-memory default here and
// its conformance suite in accountstest; sqlstore and riverqueue implement
// them for replicas.
//
// It imports only the root package, so that a backend implements these
// interfaces without compiling the dashboard (its templates, its API
// reference and their dependencies); package dashboard builds its pages
// on them. accounts/smtpmail is a Mailer through an SMTP server.
package accounts
