"""Texts shared by the benchmarks and the tests, so both measure the same thing."""

# ~600 characters, seven sentences: a long spoken answer (about 35 s of audio).
PARAGRAPH = (
    "Thank you for calling the city library. Our opening hours have changed this month: we now open "
    "at nine in the morning and close at eight in the evening from Monday to Friday. On Saturdays we "
    "open at ten and close at four, and we are closed on Sundays and public holidays. You can renew "
    "your loans online, by phone, or at any branch, and you can now borrow up to twenty items at a "
    "time. If you have a question about your account, please stay on the line and a member of our "
    "team will be with you shortly. Calls may be recorded for training and quality purposes, to help "
    "us improve the service we give you."
)

# Eight sentences of 1 to 7 s of audio: mixed short traffic.
SENTENCES = [
    "Thanks for calling.",
    "Your order has shipped and should arrive on Thursday.",
    "Please hold while I transfer you to the billing department.",
    "The quarterly report shows steady growth in every region except the north, where sales fell slightly.",
    "Turn left in two hundred meters.",
    "We have updated our privacy policy; you can read the changes on our website at any time.",
    "Good morning!",
    "If you would like to hear these options again, press nine, or stay on the line for an agent.",
]
