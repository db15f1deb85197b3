package sqlstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"time"

	"github.com/upscalekit/upscale"
)

// account is an account row with its plan, as the ledger reads it.
type account struct {
	upscale.Account
	freeMonth string
	freeUsed  int64
}

func loadAccount(ctx context.Context, tx *sql.Tx, id string) (account, error) {
	var a account
	var paid, unlimited int
	err := tx.QueryRowContext(ctx, `
		SELECT a.id, a.credits, a.share_bonus, a.free_month, a.free_used,
		       p.name, p.paid, p.unlimited, p.monthly_images, p.max_file_bytes
		FROM accounts a JOIN plans p ON p.name = a.plan
		WHERE a.id = $1`, id).Scan(
		&a.ID, &a.Credits, &a.ShareBonus, &a.freeMonth, &a.freeUsed,
		&a.Plan.Name, &paid, &unlimited, &a.Plan.MonthlyImages, &a.Plan.MaxFileBytes)
	a.Plan.Paid, a.Plan.Unlimited = paid != 0, unlimited != 0
	return a, noRows(err, "account", id)
}

// balance is what a can spend in the month of now: a free pool last used
// in an earlier month is full again.
func (a account) balance(now time.Time) upscale.Balance {
	used := a.freeUsed
	if a.freeMonth != upscale.Month(now) {
		used = 0
	}
	return upscale.Balance{Plan: a.Plan, Free: max(a.Plan.MonthlyImages-used, 0), ShareBonus: a.ShareBonus, Credits: a.Credits}
}

// take holds one unit of pool with one conditional UPDATE, so that of
// concurrent takers only as many succeed as there are units, on any engine
// and across processes. It reports false when the unit went to someone else
// since the balance was read.
func take(ctx context.Context, tx *sql.Tx, accountID string, pool upscale.Pool, month string) (bool, error) {
	var res sql.Result
	var err error
	switch pool {
	case upscale.PoolUnlimited:
		return true, nil
	case upscale.PoolFree:
		res, err = tx.ExecContext(ctx, `
			UPDATE accounts
			SET free_used = CASE WHEN free_month = $2 THEN free_used + 1 ELSE 1 END, free_month = $2
			WHERE id = $1
			  AND CASE WHEN free_month = $2 THEN free_used ELSE 0 END < (SELECT monthly_images FROM plans WHERE name = accounts.plan)`,
			accountID, month)
	case upscale.PoolShareBonus:
		res, err = tx.ExecContext(ctx, `UPDATE accounts SET share_bonus = share_bonus - 1 WHERE id = $1 AND share_bonus > 0`, accountID)
	case upscale.PoolCredit:
		res, err = tx.ExecContext(ctx, `UPDATE accounts SET credits = credits - 1 WHERE id = $1 AND credits > 0`, accountID)
	}
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// giveBack returns one unit of pool. A free unit of an earlier month is not
// returned: that month's pool is gone.
func giveBack(ctx context.Context, tx *sql.Tx, accountID string, pool upscale.Pool, month string) error {
	var err error
	switch pool {
	case upscale.PoolFree:
		_, err = tx.ExecContext(ctx, `UPDATE accounts SET free_used = free_used - 1 WHERE id = $1 AND free_month = $2 AND free_used > 0`, accountID, month)
	case upscale.PoolShareBonus:
		_, err = tx.ExecContext(ctx, `UPDATE accounts SET share_bonus = share_bonus + 1 WHERE id = $1`, accountID)
	case upscale.PoolCredit:
		_, err = tx.ExecContext(ctx, `UPDATE accounts SET credits = credits + 1 WHERE id = $1`, accountID)
	}
	return err
}

// expire gives back the units of accountID's reservations past their TTL.
// Doing it whenever the account is touched means no sweeper is needed: a
// unit held by a replica that died is back by the time anyone looks.
func (s *Store) expire(ctx context.Context, tx *sql.Tx, accountID string, now time.Time) error {
	rows, err := tx.QueryContext(ctx, `DELETE FROM reservations WHERE account_id = $1 AND expires_at < $2 RETURNING id, pool, month`, accountID, now.UnixNano())
	if err != nil {
		return err
	}
	type hold struct{ id, pool, month string }
	var expired []hold
	for rows.Next() {
		var h hold
		if err := rows.Scan(&h.id, &h.pool, &h.month); err != nil {
			rows.Close()
			return err
		}
		expired = append(expired, h)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, h := range expired {
		if err := s.endReservation(ctx, tx, accountID, h.id, upscale.Pool(h.pool), h.month, "expire", now); err != nil {
			return err
		}
	}
	return nil
}

// endReservation records the end of a reservation: "commit" keeps the unit spent,
// "release" and "expire" give it back.
func (s *Store) endReservation(ctx context.Context, tx *sql.Tx, accountID, reservationID string, pool upscale.Pool, month, reason string, now time.Time) error {
	delta := int64(0)
	if reason != "commit" {
		delta = 1
		if err := giveBack(ctx, tx, accountID, pool, month); err != nil {
			return err
		}
	}
	return journal(ctx, tx, accountID, pool, delta, reason, reservationID, month, now)
}

// Reserve implements upscale.QuotaLedger.
func (s *Store) Reserve(ctx context.Context, accountID string, needsPaid bool) (upscale.Reservation, error) {
	now := s.opts.Now()
	month := upscale.Month(now)
	var r upscale.Reservation
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if err := s.expire(ctx, tx, accountID, now); err != nil {
			return err
		}
		// Under PostgreSQL's read committed, another replica may take the
		// unit between the read and the UPDATE; the UPDATE then changes
		// nothing, and the next read sees what is really left.
		for {
			a, err := loadAccount(ctx, tx, accountID)
			if err != nil {
				return err
			}
			pool, err := upscale.ChoosePool(a.balance(now), needsPaid)
			if err != nil {
				return err
			}
			took, err := take(ctx, tx, accountID, pool, month)
			if err != nil {
				return err
			}
			if took {
				r = upscale.Reservation{ID: rand.Text(), AccountID: accountID, Pool: pool, Plan: a.Plan}
				break
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO reservations (id, account_id, pool, month, expires_at) VALUES ($1, $2, $3, $4, $5)`,
			r.ID, accountID, string(r.Pool), month, now.Add(s.opts.ReservationTTL).UnixNano()); err != nil {
			return err
		}
		return journal(ctx, tx, accountID, r.Pool, -1, "reserve", r.ID, month, now)
	})
	return r, err
}

// Commit implements upscale.QuotaLedger.
func (s *Store) Commit(ctx context.Context, reservationID string) error {
	return s.finish(ctx, reservationID, "commit")
}

// Release implements upscale.QuotaLedger.
func (s *Store) Release(ctx context.Context, reservationID string) error {
	return s.finish(ctx, reservationID, "release")
}

func (s *Store) finish(ctx context.Context, reservationID, reason string) error {
	now := s.opts.Now()
	expired := false
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var accountID, pool, month string
		var expires int64
		err := tx.QueryRowContext(ctx, `DELETE FROM reservations WHERE id = $1 RETURNING account_id, pool, month, expires_at`, reservationID).
			Scan(&accountID, &pool, &month, &expires)
		if errors.Is(err, sql.ErrNoRows) && reason == "commit" {
			return committedAlready(ctx, tx, reservationID)
		}
		if err != nil {
			return noRows(err, "reservation", reservationID)
		}
		// Past its TTL the unit goes back whatever was asked, as it would
		// have had anyone looked at the account first.
		if expired = now.UnixNano() > expires; expired {
			reason = "expire"
		}
		return s.endReservation(ctx, tx, accountID, reservationID, upscale.Pool(pool), month, reason, now)
	})
	if err == nil && expired {
		return notFound("reservation", reservationID)
	}
	return err
}

// committedAlready answers a repeated commit: nil when the journal has
// the reservation's commit, ErrNotFound otherwise.
func committedAlready(ctx context.Context, tx *sql.Tx, reservationID string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM journal WHERE request_id = $1 AND reason = 'commit'`, reservationID).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return notFound("reservation", reservationID)
	}
	return nil
}

// Hold implements upscale.ReservationHolder. A reservation past its TTL
// is given back first, as the ledger's every other call does.
func (s *Store) Hold(ctx context.Context, reservationID string, until time.Time) error {
	now := s.opts.Now()
	return s.tx(ctx, func(tx *sql.Tx) error {
		var accountID string
		err := tx.QueryRowContext(ctx, `SELECT account_id FROM reservations WHERE id = $1`, reservationID).Scan(&accountID)
		if err != nil {
			return noRows(err, "reservation", reservationID)
		}
		if err := s.expire(ctx, tx, accountID, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE reservations SET expires_at = $2 WHERE id = $1`, reservationID, until.UnixNano())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, notFound("reservation", reservationID))
		}
		return nil
	})
}

// ReservationTTL implements upscale.ReservationExpirer.
func (s *Store) ReservationTTL() time.Duration { return s.opts.ReservationTTL }

// Balance implements upscale.QuotaLedger.
func (s *Store) Balance(ctx context.Context, accountID string) (upscale.Balance, error) {
	now := s.opts.Now()
	var b upscale.Balance
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if err := s.expire(ctx, tx, accountID, now); err != nil {
			return err
		}
		a, err := loadAccount(ctx, tx, accountID)
		b = a.balance(now)
		return err
	})
	return b, err
}

// UsageByDay implements upscale.UsageReporter, from the journal's commits.
func (s *Store) UsageByDay(ctx context.Context, accountID string, from, to time.Time) ([]upscale.DayUsage, error) {
	start, end := upscale.DayBounds(from, to)
	const nanosPerDay = int64(24 * time.Hour)
	rows, err := s.db.QueryContext(ctx, `SELECT created_at / $4 AS day, pool, count(*) FROM journal
		WHERE account_id = $1 AND reason = 'commit' AND created_at >= $2 AND created_at < $3
		GROUP BY day, pool ORDER BY day`, accountID, start.UnixNano(), end.UnixNano(), nanosPerDay)
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer rows.Close()
	days := []upscale.DayUsage{}
	for rows.Next() {
		var day, n int64
		var pool string
		if err := rows.Scan(&day, &pool, &n); err != nil {
			return nil, classify(ctx, err)
		}
		at := time.Unix(0, day*nanosPerDay).UTC()
		if len(days) == 0 || !days[len(days)-1].Day.Equal(at) {
			days = append(days, upscale.DayUsage{Day: at, ByPool: map[upscale.Pool]int64{}})
		}
		days[len(days)-1].ByPool[upscale.Pool(pool)] = n
	}
	return days, classify(ctx, rows.Err())
}

// FirstCharges implements upscale.FirstCharger: the commits from since
// on, less the accounts with one before it, read by the journal's index
// of commits by time, so that a pass reads what happened since the last.
func (s *Store) FirstCharges(ctx context.Context, since time.Time) (map[string]time.Time, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT j.account_id, MIN(j.created_at) FROM journal j
		WHERE j.reason = 'commit' AND j.created_at >= $1 AND NOT EXISTS (
			SELECT 1 FROM journal e WHERE e.account_id = j.account_id AND e.reason = 'commit' AND e.created_at < $1)
		GROUP BY j.account_id`, since.UnixNano())
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer rows.Close()
	firsts := map[string]time.Time{}
	for rows.Next() {
		var account string
		var at int64
		if err := rows.Scan(&account, &at); err != nil {
			return nil, classify(ctx, err)
		}
		firsts[account] = time.Unix(0, at)
	}
	return firsts, classify(ctx, rows.Err())
}
