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

// The before/after slider: the result is clipped to the slider's right.
const slider = document.getElementById("slider");
const after = document.getElementById("after");
if (slider && after) {
  slider.hidden = false;
  document.getElementById("compare").classList.add("sliding");
  const clip = () => { after.style.clipPath = `inset(0 0 0 ${slider.value}%)`; };
  slider.addEventListener("input", clip);
  clip();
}
