package upscaletest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/upscalekit/upscale"
)

// testBillingTerms checks a BillingLedger's plan terms: ordered by the
// time of their read, an ended subscription never live again.
func testBillingTerms(t *testing.T, s billingSuite) {
	ctx, at, setup := context.Background(), s.at, s.setup
	t.Run("TermsByProviderTime", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan})
		if terms, err := l.Terms(ctx, "a"); err != nil || terms != (upscale.PlanTerms{}) {
			t.Fatalf("terms of an account never subscribed: %+v, %v; want none", terms, err)
		}
		subscribed := upscale.PlanTerms{AccountID: "a", Plan: UnlimitedPlan, Subscription: "sub_1", Status: upscale.SubscriptionActive,
			PaidThrough: at.AddDate(0, 1, 0), AsOf: at.Add(2 * time.Minute), Event: "evt_2"}
		ended := subscribed
		ended.Plan, ended.Status, ended.AsOf, ended.Event = FreePlan, upscale.SubscriptionCanceled, at.Add(3*time.Minute), "evt_3"
		stale := subscribed
		stale.Status, stale.AsOf, stale.Event = upscale.SubscriptionPastDue, at.Add(time.Minute), "evt_1"
		for _, step := range []struct {
			terms   upscale.PlanTerms
			applied bool
			plan    upscale.Plan
		}{
			{subscribed, true, UnlimitedPlan},
			{stale, false, UnlimitedPlan},      // older: changes nothing
			{subscribed, false, UnlimitedPlan}, // the same again
			{ended, true, FreePlan},
			{subscribed, false, FreePlan}, // delivered after the end: the end stands
		} {
			if applied, err := l.ApplyTerms(ctx, step.terms); err != nil || applied != step.applied {
				t.Fatalf("ApplyTerms(%s as of %v): applied %v, %v; want %v", step.terms.Status, step.terms.AsOf, applied, err, step.applied)
			}
			if b, err := l.Balance(ctx, "a"); err != nil || b.Plan != step.plan {
				t.Fatalf("after %s as of %v: plan %+v, %v; want %+v", step.terms.Status, step.terms.AsOf, b.Plan, err, step.plan)
			}
		}
		if terms, err := l.Terms(ctx, "a"); err != nil || !terms.AsOf.Equal(ended.AsOf) || terms.Status != upscale.SubscriptionCanceled || terms.Subscription != "sub_1" || !terms.PaidThrough.Equal(ended.PaidThrough) {
			t.Errorf("terms %+v, %v; want the ended subscription's", terms, err)
		}
	})

	t.Run("EndedStaysEnded", func(t *testing.T) {
		l := setup(t, upscale.Account{ID: "a", Plan: FreePlan})
		terms := func(sub string, status upscale.SubscriptionStatus, minutes int) upscale.PlanTerms {
			plan := FreePlan
			if status.Live() {
				plan = UnlimitedPlan
			}
			return upscale.PlanTerms{AccountID: "a", Plan: plan, Subscription: sub, Status: status,
				PaidThrough: at.AddDate(0, 1, 0), AsOf: at.Add(time.Duration(minutes) * time.Minute), Event: fmt.Sprintf("evt_%s_%d", sub, minutes)}
		}
		for _, step := range []struct {
			terms   upscale.PlanTerms
			applied bool
			plan    upscale.Plan
		}{
			{terms("sub_1", upscale.SubscriptionActive, 1), true, UnlimitedPlan},
			{terms("sub_1", upscale.SubscriptionCanceled, 2), true, FreePlan},
			// A read of sub_1 that began before it was canceled and
			// returned later, as of a later time: it never lives again.
			{terms("sub_1", upscale.SubscriptionActive, 3), false, FreePlan},
			{terms("sub_1", upscale.SubscriptionPastDue, 4), false, FreePlan},
			{terms("sub_2", upscale.SubscriptionActive, 5), true, UnlimitedPlan}, // a new subscription does
			{terms("sub_2", upscale.SubscriptionIncompleteExpired, 6), true, FreePlan},
			{terms("sub_2", upscale.SubscriptionActive, 7), false, FreePlan},
		} {
			if applied, err := l.ApplyTerms(ctx, step.terms); err != nil || applied != step.applied {
				t.Fatalf("ApplyTerms(%s %s as of %v): applied %v, %v; want %v", step.terms.Subscription, step.terms.Status, step.terms.AsOf, applied, err, step.applied)
			}
			if b, err := l.Balance(ctx, "a"); err != nil || b.Plan != step.plan {
				t.Fatalf("after %s %s as of %v: plan %+v, %v; want %+v", step.terms.Subscription, step.terms.Status, step.terms.AsOf, b.Plan, err, step.plan)
			}
		}
		if held, err := l.Terms(ctx, "a"); err != nil || held.Subscription != "sub_2" || held.Status != upscale.SubscriptionIncompleteExpired {
			t.Errorf("terms %+v, %v; want sub_2's end", held, err)
		}
	})
}
