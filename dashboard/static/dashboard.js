// Copy buttons: shown only where the script runs, since the key is on the
// page for anyone to select without it.
document.querySelectorAll("button.copy").forEach((button) => {
  button.hidden = false;
  button.addEventListener("click", async () => {
    const text = document.getElementById(button.dataset.copy).textContent;
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  });
});
