package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/upscalekit/upscale/client"
)

func Example() {
	c := &client.Client{BaseURL: "https://api.example.com", Key: "upk_live_0123456789abcdef"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := c.Upscale(ctx, client.Request{ImageURL: "https://example.com/cat.png", Scale: 4})
	if apiErr, ok := errors.AsType[*client.Error](err); ok && apiErr.Code == "quota_exhausted" {
		fmt.Println("out of images; the free pool refills in", apiErr.RetryAfter)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.URL, "paid by", resp.Via)
}

func ExampleClient_UpscaleFile() {
	c := &client.Client{BaseURL: "https://api.example.com", Key: "upk_live_0123456789abcdef"}
	f, err := os.Open("cat.png")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	resp, err := c.UpscaleFile(context.Background(), f, client.Request{Scale: 4, Format: "webp"})
	if apiErr, ok := errors.AsType[*client.Error](err); ok && apiErr.Code == "image_too_large" {
		fmt.Println("the file is larger than the plan takes:", apiErr.Detail)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.URL, "paid by", resp.Via)
}
